"""Attention with fewer key/value heads than query heads (grouped-query) and with fewer queries than keys (the
queries are the last positions: a prefill after a cached prefix, a decode step): the float64 reference against the
same attention with the key/value heads repeated and the queries padded in front, every pass through lower and the
plan run tile by tile, the kernels compiled, and the shapes refused with what to change."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ark_runtime.kernel.codegen import INCLUDE_DIR
from ark_runtime.lower import lower
from ark_runtime.model import Model, ModelError
from ark_runtime.ops.attention import reference_attention
from ark_runtime.reference import evaluate, run_plan
from ark_runtime.scheduler import DeviceSpec


def _repeated(k, kv_heads, group):
    """k [..., S, kv_heads * d] with each head repeated `group` times: the multi-head form of grouped-query k."""
    *lead, s, e = k.shape
    d = e // kv_heads
    return np.repeat(k.reshape(*lead, s, kv_heads, d), group, axis=-2).reshape(*lead, s, kv_heads * group * d)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.sampled_from([(4, 4), (4, 2), (4, 1), (8, 2)]), st.integers(1, 9), st.integers(0, 7),
       st.booleans(), st.sampled_from([4, 8]))
def test_the_reference_is_multi_head_attention_with_repeated_heads_and_the_queries_last(batch, heads_kv, sq, prefix,
                                                                                        causal, d):
    heads, kv_heads = heads_kv
    skv = sq + prefix
    rng = np.random.default_rng(batch * 100 + sq)
    q = rng.standard_normal((batch, sq, heads * d))
    k, v = (rng.standard_normal((batch, skv, kv_heads * d)) for _ in range(2))
    got = reference_attention(q, k, v, heads=heads, causal=causal, kv_heads=kv_heads)
    # the same queries placed at the end of a full-length query block, with every head's own k and v
    full_q = np.concatenate([np.zeros((batch, prefix, heads * d)), q], axis=1)
    group = heads // kv_heads
    want = reference_attention(full_q, _repeated(k, kv_heads, group), _repeated(v, kv_heads, group), heads=heads,
                               causal=causal)[:, prefix:]
    assert np.allclose(got, want, rtol=1e-12, atol=1e-12)


def _model(dtype: str, batch: int, sq: int, skv: int, heads: int, kv_heads: int, d: int, causal: bool) -> Model:
    m = Model(f"gqa-{dtype}")
    q = m.input("q", (batch, sq, heads * d), dtype)
    k, v = (m.input(n, (batch, skv, kv_heads * d), dtype) for n in ("k", "v"))
    m.output(m.attention(q, k, v, heads=heads, kv_heads=kv_heads, causal=causal))
    return m


@pytest.mark.parametrize(("batch", "sq", "skv", "heads", "kv_heads", "d", "causal"), [
    (1, 37, 37, 8, 2, 16, True), (2, 5, 70, 4, 1, 32, True), (1, 1, 129, 8, 8, 64, True), (3, 17, 40, 6, 3, 8, False),
])
def test_the_plan_computes_the_reference_tile_by_tile(batch, sq, skv, heads, kv_heads, d, causal):
    m = _model("fp32", batch, sq, skv, heads, kv_heads, d, causal)
    lw = lower(m, DeviceSpec(num_sms=8))
    rng = np.random.default_rng(sq)
    inputs = {t.name: rng.standard_normal(t.shape) for t in m.tensors if t.producer is None}
    want = evaluate(m, inputs)[m.outputs[0]]
    got = run_plan(lw.plan, lw.model, inputs)[lw.model.outputs[0]]
    assert np.allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_the_kernels_compile(dtype, arch):
    from driver.gpu import compile

    lw = lower(_model(dtype, 2, 3, 67, 8, 2, 64, True), DeviceSpec(num_sms=132))
    assert "ark::attention_tile" in lw.source.text
    assert compile.cubin(lw.source.text, arch, (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"


@pytest.mark.parametrize(("shapes", "attrs", "message"), [
    (((2, 64), (2, 32), (2, 32)), {"heads": 4, "kv_heads": 3}, "kv_heads=3 must be a positive int dividing heads=4"),
    (((2, 64), (2, 48), (2, 48)), {"heads": 4, "kv_heads": 2}, r"k and v must both be \['Skv', 32\]"),
    (((2, 64), (2, 32), (3, 32)), {"heads": 4, "kv_heads": 2}, "k and v must both be"),
    (((9, 64), (4, 64), (4, 64)), {"heads": 4}, "causal with 9 queries but 4 keys"),
    (((1, 2, 64), (2, 2, 64), (2, 2, 64)), {"heads": 4}, "k and v must both be"),
    (((2, 64), (2, 64), (2, 64)), {"heads": 4, "kv_heads": True}, "kv_heads=True"),
    (((2, 64), (2, 64), (2, 64)), {"heads": 4, "kv_heads": 0}, "kv_heads=0"),
])
def test_bad_shapes_are_refused_saying_what_fits(shapes, attrs, message):
    m = Model("bad")
    q, k, v = (m.input(n, s, "fp32") for n, s in zip("qkv", shapes))
    with pytest.raises(ModelError, match=message):
        m.attention(q, k, v, **attrs)


def test_bidirectional_attention_may_have_more_queries_than_keys():
    m = Model("cross")
    q, k = m.input("q", (9, 32), "fp32"), m.input("k", (4, 32), "fp32")
    assert m.attention(q, k, k, heads=2, causal=False).shape == (9, 32)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 40), st.integers(0, 40), st.sampled_from([(2, 1), (4, 2), (2, 2)]), st.booleans(),
       st.integers(1, 16))
def test_random_shapes_plan_and_compute_the_reference(sq, prefix, heads_kv, causal, sms):
    heads, kv_heads = heads_kv
    m = _model("fp32", 1, sq, sq + prefix, heads, kv_heads, 8, causal)
    lw = lower(m, DeviceSpec(num_sms=sms))
    rng = np.random.default_rng(sq + prefix)
    inputs = {t.name: rng.standard_normal(t.shape) for t in m.tensors if t.producer is None}
    got = run_plan(lw.plan, lw.model, inputs)[lw.model.outputs[0]]
    assert np.allclose(got, evaluate(m, inputs)[m.outputs[0]], rtol=1e-12, atol=1e-12)
