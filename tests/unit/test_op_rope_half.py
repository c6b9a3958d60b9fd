"""RoPE's rotate-half (Hugging Face) convention and rotation per head (ops/rope.py, elementwise.cuh's
rope_heads_tile): the float64 reference against the two textbook formulas, the refusals, the interleaved default
unchanged (no attributes, the same rope_tile call), plans that run tile by tile to the reference (tiles that cut a
head read the whole head), and the kernel compiled for sm_90 and sm_90a. tests/gpu/test_op_rope_half.py runs it on a
GPU."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ark_runtime.kernel.codegen import INCLUDE_DIR
from ark_runtime.lower import LowerOptions, lower
from ark_runtime.model import Model, ModelError
from ark_runtime.reference import evaluate, run_plan
from ark_runtime.scheduler import DeviceSpec
from ark_runtime.tiling import tile_model


def _hf(x, cos, sin, hd):
    """transformers' apply_rotary_pos_emb on q [B, heads, S, D]: q * cos + rotate_half(q) * sin, with cos and sin
    [S, D] (the D/2 angles twice)."""
    b, s, e = x.shape
    q = x.reshape(b, s, e // hd, hd).transpose(0, 2, 1, 3)
    cos2, sin2 = np.concatenate([cos, cos], -1), np.concatenate([sin, sin], -1)
    rotated = np.concatenate([-q[..., hd // 2:], q[..., :hd // 2]], -1)
    return (q * cos2 + rotated * sin2).transpose(0, 2, 1, 3).reshape(x.shape)


def _meta(x, cos, sin, hd):
    """Meta's Llama: each head's (2j, 2j+1) as one complex number times e^(i theta_j)."""
    b, s, e = x.shape
    q = x.reshape(b, s, e // hd, hd // 2, 2)
    z = (q[..., 0] + 1j * q[..., 1]) * (cos + 1j * sin)[None, :, None, :]
    return np.stack([z.real, z.imag], -1).reshape(x.shape)


def _model(shape, hd, style, dtype="fp32", name="rope"):
    m = Model(name)
    x = m.input("x", shape, dtype)
    cos, sin = m.input("cos", (shape[-2], hd // 2), dtype), m.input("sin", (shape[-2], hd // 2), dtype)
    m.output(m.rope(x, cos, sin, style=style, head_dim=hd))
    return m


def _inputs(shape, hd, seed=0):
    rng = np.random.default_rng(seed)
    theta = rng.uniform(-np.pi, np.pi, (shape[-2], hd // 2))
    return {"x": rng.standard_normal(shape), "cos": np.cos(theta), "sin": np.sin(theta)}


@pytest.mark.parametrize("shape, hd", [((2, 5, 8), 8), ((1, 7, 24), 8), ((3, 4, 64), 16), ((2, 3, 12), 6)])
@pytest.mark.parametrize("style, formula", [("half", _hf), ("interleaved", _meta)])
def test_the_reference_is_the_textbook_formula(shape, hd, style, formula):
    m = _model(shape, hd, style)
    ins = _inputs(shape, hd)
    got = evaluate(m, ins)[m.outputs[0]]
    np.testing.assert_allclose(got, formula(ins["x"], ins["cos"], ins["sin"], hd), rtol=0, atol=1e-13)


def test_the_two_styles_differ_and_each_keeps_a_heads_norm():
    shape, hd = (1, 6, 32), 16
    ins = _inputs(shape, hd)
    half, inter = (evaluate(m, ins)[m.outputs[0]] for m in (_model(shape, hd, s) for s in ("half", "interleaved")))
    assert np.abs(half - inter).max() > 0.1
    for y in (half, inter):
        norms = np.linalg.norm(y.reshape(1, 6, 2, hd), axis=-1)
        np.testing.assert_allclose(norms, np.linalg.norm(ins["x"].reshape(1, 6, 2, hd), axis=-1), rtol=1e-12)


def test_the_interleaved_default_keeps_no_attributes_and_its_rope_tile_call():
    for kw in ({}, {"style": "interleaved"}, {"head_dim": 64}, {"style": "interleaved", "head_dim": 64}):
        m = Model("rope")
        x = m.input("x", (2, 37, 64), "bf16")
        y = m.rope(x, m.input("cos", (37, 32), "bf16"), m.input("sin", (37, 32), "bf16"), **kw)
        m.output(y)
        assert m.ops[0].attrs == ()
        lw = lower(m, DeviceSpec(num_sms=16), LowerOptions(), cache=False)
        assert lw.plan.variants == [{"template": "rope_tile"}]
        assert ("ark::rope_tile<__nv_bfloat16>((const __nv_bfloat16*)T[io[0]], (const __nv_bfloat16*)T[io[1]], "
                "(const __nv_bfloat16*)T[io[2]], (__nv_bfloat16*)T[io[3]], 37, 64, r0, r1, c0, c1);") in lw.source.text
        assert "rope_heads_tile<" not in lw.source.text.split("namespace gen {")[1]


def test_other_styles_and_heads_are_kept_and_choose_the_heads_tile():
    m = _model((2, 37, 64), 16, "half", "fp16")
    assert dict(m.ops[0].attrs) == {"style": "half", "head_dim": 16}
    lw = lower(m, DeviceSpec(num_sms=16), LowerOptions(), cache=False)
    assert lw.plan.variants == [{"template": "rope_heads_tile", "style": "half", "head_dim": 16}]
    text = lw.source.text
    assert "ark::rope_heads_tile<__half, true>(" in text and ", 37, 64, 16, r0, r1, c0, c1);" in text
    m = _model((2, 37, 64), 16, "interleaved")
    assert dict(m.ops[0].attrs) == {"head_dim": 16}
    assert "ark::rope_heads_tile<float, false>(" in lower(m, DeviceSpec(num_sms=4), cache=False).source.text


@pytest.mark.parametrize("kw, message", [
    ({"style": "rotate_half"}, r"rope: style 'rotate_half' is not one of 'interleaved', 'half'"),
    ({"style": None}, r"rope: style None is not one of"),
    ({"head_dim": 0}, r"rope: head_dim must be a positive int .*not 0"),
    ({"head_dim": True}, r"rope: head_dim must be a positive int .*not True"),
    ({"head_dim": 16.0}, r"rope: head_dim must be a positive int .*not 16.0"),
    ({"head_dim": "16"}, r"rope: head_dim must be a positive int .*not '16'"),
    ({"head_dim": 6}, r"rope: head_dim 6 must be even and divide x's last axis 64"),
    ({"head_dim": 128}, r"rope: head_dim 128 must be even and divide x's last axis 64"),
    ({"head_dim": 32}, r"rope: cos and sin must both be \(5, 16\) \(S, head_dim / 2\), or \(10, 16\) \(a row of "
                       r"angles per row of x\), for x \(2, 5, 64\) with head_dim 32, not \(5, 8\) and \(5, 8\)"),
    ({"heads": 4}, r"rope takes no argument heads \(it takes style, head_dim\)"),
])
def test_bad_attributes_are_refused_naming_the_op_and_what_to_change(kw, message):
    m = Model("bad")
    x, cos, sin = m.input("x", (2, 5, 64)), m.input("cos", (5, 8)), m.input("sin", (5, 8))
    with pytest.raises(ModelError, match=message):
        m.op("rope", x, cos, sin, **kw)
    assert m.ops == []


def test_bad_tensors_are_refused():
    m = Model("bad")
    with pytest.raises(ModelError, match=r"rope: x must be \[\.\.\., S, D\] with D even, not \(5, 63\)"):
        m.rope(m.input("x", (5, 63)), m.input("c", (5, 31)), m.input("s", (5, 31)), style="half")
    with pytest.raises(ModelError, match=r"rope: cos and sin must be fp16 like x, not fp32 and fp32"):
        m.rope(m.input("h", (5, 8), "fp16"), m.input("c2", (5, 4)), m.input("s2", (5, 4)), style="half")
    with pytest.raises(ModelError, match=r"rope: i is int32; the op takes fp32, fp16, bf16"):
        m.rope(m.input("i", (5, 8), "int32"), m.input("c3", (5, 4)), m.input("s3", (5, 4)), style="half")


def _assert_plan_computes(m, sms, seed=0):
    lw = lower(m, DeviceSpec(num_sms=sms), cache=False)
    shape, hd = m.tensors[0].shape, 2 * m.tensors[1].shape[-1]
    ins = _inputs(shape, hd, seed)
    want = evaluate(m, ins)[m.outputs[0]]
    got = run_plan(lw.plan, lw.model, ins, seed=seed)[lw.model.outputs[0]]
    assert not np.isnan(got).any(), "a tile read outside its regions"
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3), st.integers(1, 9), st.integers(1, 6), st.sampled_from([2, 4, 6, 16, 34]),
       st.sampled_from(["half", "interleaved"]), st.integers(1, 12), st.integers(0, 3))
def test_random_ropes_run_tile_by_tile_to_the_reference(batch, seq, heads, hd, style, sms, seed):
    _assert_plan_computes(_model((batch, seq, heads * hd), hd, style), sms, seed)


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_tiles_that_cut_a_head_read_the_whole_head(style):
    m = _model((2, 3, 4224), 96, style)  # rows of 44 heads, cut into tiles of 2,048 columns
    tiles = tile_model(m, 16)
    cut = [t for t in tiles if t.writes.c0 % 96 or t.writes.c1 % 96]
    assert cut, "the case should cut heads"
    for t in tiles:
        x = t.reads[0]
        assert (x.c0, x.c1) == (t.writes.c0 // 96 * 96, -(-t.writes.c1 // 96) * 96)
    _assert_plan_computes(m, 16)


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_the_kernel_compiles_in_every_dtype(arch):
    from driver.gpu import compile

    m = Model("ropes")
    outs = []
    for dtype in ("fp32", "fp16", "bf16"):
        x = m.input(f"x_{dtype}", (2, 33, 96), dtype)
        cos, sin = m.input(f"cos_{dtype}", (33, 16), dtype), m.input(f"sin_{dtype}", (33, 16), dtype)
        outs += [m.rope(x, cos, sin, style=s, head_dim=32) for s in ("half", "interleaved")]
        outs.append(m.rope(x, m.input(f"c_{dtype}", (33, 48), dtype), m.input(f"s_{dtype}", (33, 48), dtype),
                           style="half"))
    m.output(*outs)
    lw = lower(m, DeviceSpec(num_sms=132), LowerOptions(), cache=False)
    assert lw.source.text.count("ark::rope_heads_tile<") == 9
    assert compile.cubin(lw.source.text, arch, (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 4), st.integers(1, 3), st.sampled_from([2, 8, 16]), st.sampled_from(["half", "interleaved"]),
       st.integers(1, 8), st.integers(0, 3))
def test_a_row_of_angles_per_row_turns_each_sequence_at_its_own_position(batch, heads, hd, style, sms, seed):
    """x [B, 1, E] with cos/sin [B, D/2]: sequence b's token turned by row b's angles, what the one-sequence op
    gives that token; and the plan tile by tile is the reference."""
    rng = np.random.default_rng(seed)
    x, theta = rng.standard_normal((batch, 1, heads * hd)), rng.uniform(-np.pi, np.pi, (batch, hd // 2))
    m = Model("per-row")
    out = m.rope(m.input("x", x.shape), m.input("cos", theta.shape), m.input("sin", theta.shape), style=style,
                 head_dim=hd if heads > 1 else None)
    m.output(out)
    ins = {"x": x, "cos": np.cos(theta), "sin": np.sin(theta)}
    got = evaluate(m, ins)[m.outputs[0]]
    formula = _hf if style == "half" else _meta
    for b in range(batch):
        one = formula(x[b:b + 1], np.cos(theta[b:b + 1]), np.sin(theta[b:b + 1]), hd)
        np.testing.assert_allclose(got[b:b + 1], one, rtol=0, atol=1e-13)
    lw = lower(m, DeviceSpec(num_sms=sms), cache=False)
    np.testing.assert_allclose(run_plan(lw.plan, lw.model, ins, seed=seed)[lw.model.outputs[0]], got, rtol=1e-12,
                               atol=1e-12)


def test_angles_neither_per_position_nor_per_row_are_refused_naming_both():
    m = Model("bad-rows")
    with pytest.raises(ModelError, match=r"must both be \(1, 4\) \(S, head_dim / 2\), or \(3, 4\) \(a row of angles "
                                         r"per row of x\), for x \(3, 1, 8\)"):
        m.rope(m.input("x", (3, 1, 8)), m.input("c", (2, 4)), m.input("s", (2, 4)))
    with pytest.raises(ModelError, match=r"not \(3, 4\) and \(1, 4\)"):
        m.rope(m.input("y", (3, 1, 8)), m.input("c2", (3, 4)), m.input("s2", (1, 4)))


def test_per_row_angles_compile():
    from driver.gpu import compile

    m = Model("per-row-compile")
    x = m.input("x", (4, 1, 256), "bf16")
    cos, sin = m.input("cos", (4, 32), "bf16"), m.input("sin", (4, 32), "bf16")
    m.output(m.rope(x, cos, sin, style="half", head_dim=64))
    lw = lower(m, DeviceSpec(num_sms=132), LowerOptions(), cache=False)
    assert "ark::rope_heads_tile<__nv_bfloat16, true>(" in lw.source.text and ", 4, 256, 64," in lw.source.text
    assert compile.cubin(lw.source.text, "sm_90a", (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"
