"""The transpose op (ops/transpose.py, transpose.cuh): [..., A, B] -> [..., B, A]; its refusals, its tiles (whole
small matrices several to a tile, square blocks of large ones) covering the output once and reading exactly the
block they transpose, plans that run tile by tile to the reference in every dtype, a tied embedding's logits, and the
kernel compiled for sm_90 and sm_90a. tests/gpu/test_op_transpose.py runs it on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ark_runtime.kernel.codegen import INCLUDE_DIR
from ark_runtime.lower import LowerOptions, lower
from ark_runtime.model import Model, ModelError
from ark_runtime.plan import choose_variants
from ark_runtime.reference import evaluate, run_plan
from ark_runtime.scheduler import DeviceSpec
from ark_runtime.tiling import tile_model
from tests.unit.test_plan_reference import assert_plan_computes


def _model(shape, dtype="fp32"):
    m = Model("t")
    m.output(m.transpose(m.input("x", shape, dtype)))
    return m


def test_the_reference_swaps_the_last_two_axes():
    m = _model((2, 3, 4, 5))
    x = np.arange(120.0).reshape(2, 3, 4, 5)
    y = evaluate(m, {"x": x})[m.outputs[0]]
    assert y.shape == (2, 3, 5, 4) == m.tensors[m.outputs[0]].shape
    assert all(y[a, b, j, i] == x[a, b, i, j] for a in range(2) for b in range(3) for i in range(4) for j in range(5))


def test_bad_calls_are_refused_naming_the_op():
    m = Model("bad")
    with pytest.raises(ModelError, match=r"transpose: v must have two axes at least \(\[\.\.\., A, B\]\), not \(5,\)"):
        m.transpose(m.input("v", (5,)))
    x = m.input("x", (3, 4))
    with pytest.raises(ModelError, match=r"transpose takes no argument axes"):
        m.op("transpose", x, axes=(0, 1))
    with pytest.raises(ModelError, match=r"transpose takes 1 tensor\(s\), not 2"):
        m.op("transpose", x, x)
    assert m.ops == []


def _assert_tiles_cover_once_and_read_their_block(m, sms):
    x, out = m.tensors[0], m.tensors[m.outputs[0]]
    a, b = x.shape[-2:]
    hits = np.zeros((out.rows, out.cols), int)
    for t in tile_model(m, sms):
        w, (r,) = t.writes, t.reads
        hits[w.r0:w.r1, w.c0:w.c1] += 1
        m0, m1 = w.r0 // b, -(-w.r1 // b)  # the matrices it writes: rows of x m0 * a .. m1 * a
        if m1 - m0 == 1:  # a block of one matrix: x rows i (its columns), x columns j (its rows)
            assert (r.r0, r.r1, r.c0, r.c1) == (m0 * a + w.c0, m0 * a + w.c1, w.r0 - m0 * b, w.r1 - m0 * b)
        else:  # whole matrices
            assert (w.r0 % b, w.r1 % b, w.c0, w.c1) == (0, 0, 0, a)
            assert (r.r0, r.r1, r.c0, r.c1) == (m0 * a, m1 * a, 0, b)
    assert (hits == 1).all()


@pytest.mark.parametrize("shape, sms, want", [
    ((100, 3, 5), 8, {"matrices": 136}), ((1000, 7, 9), 132, {"matrices": 32}), ((33, 4100), 1, {"matrices": 1}),
    ((2, 33, 4100), 8, {"edge": 256}), ((2000, 600), 1, {"edge": 1024}), ((333, 4100), 8, {"edge": 512}),
    ((2, 97, 300), 132, {"edge": 64}), ((32000, 4096), 132, {"edge": 1024})])
def test_tiles_fill_the_sms_cover_the_output_once_and_read_their_block(shape, sms, want):
    m = _model(shape, "bf16")
    assert choose_variants(m, DeviceSpec(num_sms=sms)) == [{"template": "transpose_tile", **want}]
    _assert_tiles_cover_once_and_read_their_block(m, sms)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 4), max_size=2), st.integers(1, 90), st.integers(1, 90), st.integers(1, 12),
       st.sampled_from(["fp32", "fp16", "bf16", "int32"]), st.integers(0, 3))
def test_random_transposes_run_tile_by_tile_to_the_reference(lead, a, b, sms, dtype, seed):
    m = _model((*lead, a, b), dtype)
    _assert_tiles_cover_once_and_read_their_block(m, sms)
    assert_plan_computes(m, sms, seed)


def test_large_blocks_run_tile_by_tile_to_the_reference():
    m = _model((2, 150, 2100))  # blocks of 256 (630,000 / 16 SMs: 39,375 a tile); 150 and 2,100 no multiple of it
    assert choose_variants(m, DeviceSpec(num_sms=16))[0]["edge"] == 256
    assert_plan_computes(m, 16)


def test_a_tied_embedding_gives_h_times_the_table_transposed():
    m = Model("tied")
    table, ids = m.input("table", (50, 96)), m.input("ids", (7,), "int32")
    h = m.rmsnorm(m.embedding(table, ids), m.input("g", (96,)))
    logits = m.matmul(h, m.transpose(table))
    m.output(logits)
    rng = np.random.default_rng(0)
    ins = {"table": rng.standard_normal((50, 96)), "ids": rng.integers(0, 50, 7), "g": rng.standard_normal(96)}
    want = evaluate(m, ins)
    hv = want[h.id]
    np.testing.assert_allclose(want[logits.id], hv @ ins["table"].T, rtol=1e-12)
    lw = lower(m, DeviceSpec(num_sms=8), cache=False)
    got = run_plan(lw.plan, lw.model, ins)[lw.model.outputs[0]]
    np.testing.assert_allclose(got, want[logits.id], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_the_kernel_compiles_in_every_dtype(arch):
    from driver.gpu import compile

    m = Model("transposes")
    outs = []
    for dtype in ("fp32", "fp16", "bf16", "int32"):
        outs += [m.transpose(m.input(f"small_{dtype}", (40, 3, 5), dtype)),
                 m.transpose(m.input(f"large_{dtype}", (2, 97, 300), dtype))]
    m.output(*outs)
    lw = lower(m, DeviceSpec(num_sms=132), LowerOptions(), cache=False)
    assert lw.source.smem_bytes >= 32 * 33 * 4 and "ark::TRANSPOSE_SMEM <= 4224" in lw.source.text
    for ct in ("float", "__half", "__nv_bfloat16", "int"):
        assert f"ark::transpose_tile<{ct}>(" in lw.source.text
    assert compile.cubin(lw.source.text, arch, (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"
