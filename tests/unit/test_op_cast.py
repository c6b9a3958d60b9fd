"""The cast op (ops/cast.py, cast.cuh): its float64 reference rounds as the GPU's conversions do (to nearest even,
overflow to inf, an int32 rounded once), the refusals, plans that run tile by tile to the reference, casts that end
an elementwise chain rather than join it, and the kernel compiled for sm_90 and sm_90a. tests/gpu/test_op_cast.py
runs it on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ark_runtime.host_values import from_bits, to_bits
from ark_runtime.kernel.codegen import INCLUDE_DIR
from ark_runtime.lower import LowerOptions, lower
from ark_runtime.model import Model, ModelError
from ark_runtime.ops.cast import round_to
from ark_runtime.reference import evaluate, run_plan
from ark_runtime.scheduler import DeviceSpec
from tests.unit.test_plan_reference import assert_plan_computes

FLOATS = ("fp32", "fp16", "bf16")
PAIRS = [(a, b) for a in (*FLOATS, "int32") for b in FLOATS if a != b]


def _hostile_floats(n: int, seed: int = 0) -> np.ndarray:
    """fp32 values of every kind: normal over the whole range, subnormal, exact ties of bf16 and fp16, the limits,
    signed zeros, infinities, NaN."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    with np.errstate(invalid="ignore"):  # signalling NaNs among the bit patterns
        x = bits.view(np.float32).astype(np.float64)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65519.99, 65520.0, -65520.0, 6e-8, 2.0 ** -24,
               2.0 ** -25, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1e-40, -1e-45,
               float.fromhex("0x1.fep127"), float.fromhex("0x1.ff8p127"), float(np.finfo(np.float32).max)]
    with np.errstate(invalid="ignore"):
        return np.concatenate([x, np.array(special)]).astype(np.float32).astype(np.float64)


def test_bf16_rounding_is_the_host_values_rounding_for_every_kind_of_fp32():
    x = _hostile_floats(20000)
    t = Model("v").input("t", x.shape, "bf16")
    want = from_bits(t, to_bits(t, x)).astype(np.float64)
    got = round_to("bf16", x)
    np.testing.assert_array_equal(got, want)
    assert np.isinf(round_to("bf16", np.array([float.fromhex("0x1.ff8p127")])))[0]  # the tie past the largest


@pytest.mark.parametrize("dtype, numpy_type", [("fp32", np.float32), ("fp16", np.float16)])
def test_fp32_and_fp16_rounding_is_numpys(dtype, numpy_type):
    x = _hostile_floats(20000, seed=1)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(round_to(dtype, x), x.astype(numpy_type).astype(np.float64))
    assert round_to("fp16", np.array([65519.0, 65520.0])).tolist() == [65504.0, np.inf]


def test_an_int32_is_rounded_once():
    """2^24 + 2^16 + 1 is nearer 2^24 + 2^17 than 2^24 in bf16; through fp32 it would first round to the tie
    2^24 + 2^16, then to even, 2^24."""
    ids = np.array([2 ** 24 + 2 ** 16 + 1, 2 ** 24 + 1, 2 ** 31 - 1, -(2 ** 31), 65520, 65519, 7, -3], np.float64)
    assert round_to("bf16", ids).tolist() == [2 ** 24 + 2 ** 17, 2 ** 24, 2 ** 31, -(2 ** 31), 65536, 65536, 7, -3]
    assert round_to("fp32", ids).tolist() == [2 ** 24 + 2 ** 16, 2 ** 24, 2 ** 31, -(2 ** 31), 65520, 65519, 7, -3]
    assert round_to("fp16", ids).tolist() == [np.inf, np.inf, np.inf, -np.inf, np.inf, 65504, 7, -3]


@pytest.mark.parametrize("kw, message", [
    ({}, r"cast: dtype None is not one of fp32, fp16, bf16"),
    ({"dtype": "int32"}, r"cast: dtype 'int32' is not one of fp32, fp16, bf16 \(a cast makes floats"),
    ({"dtype": "float16"}, r"cast: dtype 'float16' is not one of fp32, fp16, bf16"),
    ({"dtype": "fp32"}, r"cast: x is already fp32; use it as it is"),
    ({"dtype": "fp16", "round": "down"}, r"cast takes no argument round \(it takes dtype\)"),
])
def test_bad_arguments_are_refused_naming_the_op_and_what_to_change(kw, message):
    m = Model("bad")
    x = m.input("x", (3, 4))
    with pytest.raises(ModelError, match=message):
        m.op("cast", x, **kw)
    with pytest.raises(ModelError, match=r"cast takes 1 tensor\(s\), not 2"):
        m.op("cast", x, x, dtype="fp16")
    assert m.ops == []


def test_the_output_has_the_new_dtype_and_the_same_shape():
    m = Model("c")
    y = m.cast(m.input("ids", (2, 3, 5), "int32"), "bf16")
    assert (y.shape, y.dtype, dict(m.ops[0].attrs)) == ((2, 3, 5), "bf16", {"dtype": "bf16"})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PAIRS), st.lists(st.integers(1, 7), min_size=1, max_size=2), st.integers(1, 3000),
       st.integers(1, 12), st.integers(0, 3))
def test_random_casts_run_tile_by_tile_to_the_reference(pair, lead, cols, sms, seed):
    src, dst = pair
    m = Model("cast")
    y = m.cast(m.input("x", (*lead, cols), src), dst)
    m.output(m.cast(y, src) if src != "int32" else y)
    assert_plan_computes(m, sms, seed)


def test_a_cast_ends_an_elementwise_chain_and_starts_none():
    m = Model("chain")
    x = m.input("x", (16, 64))
    h = m.cast(m.unary("neg", m.unary("exp", x)), "bf16")
    y = m.unary("relu", m.unary("gelu", h))
    m.output(y)
    lw = lower(m, DeviceSpec(num_sms=8), cache=False)
    assert [op.kind for op in lw.model.ops] == ["fused", "cast", "fused"]
    ins = {"x": np.random.default_rng(0).standard_normal((16, 64))}
    got = run_plan(lw.plan, lw.model, ins)[lw.model.outputs[0]]
    np.testing.assert_allclose(got, evaluate(m, ins)[y.id], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_the_kernel_compiles_for_every_pair(arch):
    from driver.gpu import compile

    m = Model("casts")
    xs = {d: m.input(f"x_{d}", (3, 37, 200), d) for d in (*FLOATS, "int32")}
    m.output(*(m.cast(xs[a], b) for a, b in PAIRS))
    lw = lower(m, DeviceSpec(num_sms=132), LowerOptions(), cache=False)
    for a, b in PAIRS:
        ct = {"fp32": "float", "fp16": "__half", "bf16": "__nv_bfloat16", "int32": "int"}
        assert f"ark::cast_tile<{ct[a]}, {ct[b]}>(" in lw.source.text
    assert compile.cubin(lw.source.text, arch, (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"
