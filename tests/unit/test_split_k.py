"""Split-K without a GPU: which matmuls are cut and into how many parts, the rewritten model computing what the
model as written computes when its plan runs tile by tile (each tile seeing only the regions it declares), names
kept for binding, and the kernels compiling for sm_90a (the wgmma parts) and sm_90 (the fallback)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ark_runtime import models
from ark_runtime.fusion import fuse
from ark_runtime.model import Model
from ark_runtime.plan import build_plan
from ark_runtime.reference import evaluate, run_plan
from ark_runtime.scheduler import DeviceSpec
from ark_runtime.split_k import split_k
from ark_runtime.ops.matmul import MIN_PART_K, SKINNY_PART_COLS, SKINNY_ROWS, SM90_BK, k_splits, skinny_cols, sm90_matmul_block, split_block

H100 = DeviceSpec(num_sms=132, wgmma=True)


def _matmul(m: int, k: int, n: int, dtype: str = "bf16") -> Model:
    model = Model(f"mm{m}x{k}x{n}")
    model.output(model.matmul(model.input("a", (m, k), dtype), model.input("b", (k, n), dtype)))
    return model


def _inputs(model: Model, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape) for t in model.tensors if t.producer is None}


def test_the_named_models_split_only_their_short_matmuls():
    block = split_k(fuse(models.transformer_block(128)), H100)
    split = {block.tensors[o.output].name: o.attr("k_splits") for o in block.ops if o.attr("k_splits") and o.kind == "matmul"}
    assert split and all(name.endswith(".parts") for name in split)
    assert max(split.values()) == 4  # the down projection: 32 tiles of K 4096
    mlp = split_k(fuse(models.mlp(64)), H100)
    assert [o.attr("k_splits") for o in mlp.ops if o.kind == "matmul"] == [None, 2]
    assert split_block(64, 4096, 16384, 2, "bf16", 132) == (64, 64)
    for batch in (1, 8):  # the down projection's 32 weight-streaming tiles of 128 columns, K 16384
        mlp = split_k(fuse(models.mlp(batch)), H100)
        assert [o.attr("k_splits") for o in mlp.ops if o.kind == "matmul"] == [None, 4]
        assert split_block(batch, 4096, 16384, 4, "bf16", 132) == (batch, SKINNY_PART_COLS)
    for name in ("block-s512", "matmul8192"):  # tiles enough
        m = fuse(models.named(name))
        assert split_k(m, H100) is m
    assert split_k(fuse(models.transformer_block(128)), DeviceSpec(num_sms=132, wgmma=False)).ops == \
        fuse(models.transformer_block(128)).ops  # no wgmma tile, no split


@settings(max_examples=40, deadline=None)
@given(m=st.integers(17, 300), k=st.sampled_from([512, 1024, 2048, 4096, 1000, 4160]), n=st.integers(1, 40).map(lambda v: 8 * v),
       sms=st.sampled_from([8, 32, 132]))
def test_the_split_rule(m, k, n, sms):
    s = k_splits(m, n, k, "bf16", sms)
    block = sm90_matmul_block(m, n, k, "bf16", sms)
    tiles = -(-m // block[0]) * -(-n // block[1])
    if s == 1:
        assert 2 * tiles > sms or not any(tiles * p <= sms and k % (p * SM90_BK) == 0 and k // p >= MIN_PART_K
                                          for p in (2, 4, 8))
    else:
        assert 2 * tiles <= sms and tiles * s <= sms and k % (s * SM90_BK) == 0 and k // s >= MIN_PART_K
    assert k_splits(m, n, k, "fp32", sms) == 1 and k_splits(m, n, k, "bf16", sms, wgmma=False) == 1


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 16), k=st.sampled_from([512, 1024, 2048, 4096, 16384, 1000, 4160]),
       n=st.integers(1, 160).map(lambda v: 32 * v), sms=st.sampled_from([8, 32, 132]),
       dtype=st.sampled_from(["bf16", "fp16", "fp32"]), wgmma=st.booleans())
def test_the_split_rule_of_skinny_matmuls(m, k, n, sms, dtype, wgmma):
    """A skinny matmul (gemv.cuh, gemv_mma.cuh) splits exactly when its tiles would be narrower than SKINNY_PART_COLS
    and K gives parts: then SKINNY_PART_COLS-wide tiles, as many parts as fit the SMs."""
    s = k_splits(m, n, k, dtype, sms, wgmma)
    assert m <= SKINNY_ROWS and sm90_matmul_block(m, n, k, dtype, sms, wgmma) is None  # never the wgmma tile
    tiles, width = -(-n // SKINNY_PART_COLS), skinny_cols(n, sms)
    fits = [p for p in (8, 4, 2) if tiles * p <= sms and k % (p * SM90_BK) == 0 and k // p >= MIN_PART_K
            and k // p * min(n, SKINNY_PART_COLS) <= k * width]  # a part's tile reads no more of B than before
    if width >= SKINNY_PART_COLS or 2 * tiles > sms or not fits:
        assert s == 1
    else:
        assert s == fits[0]
        assert split_block(m, n, k, s, dtype, sms, wgmma) == (m, SKINNY_PART_COLS)


@pytest.mark.parametrize(("m", "k", "n"), [(100, 2048, 136), (17, 4096, 64), (300, 2048, 200), (1, 4096, 512),
                                           (3, 8192, 1000), (1, 4096, 96)])
def test_a_split_matmul_computes_the_matmul_tile_by_tile(m, k, n):
    model = _matmul(m, k, n)
    runs = split_k(model, H100)
    assert any(o.kind == "split_sum" for o in runs.ops), "the case should split"
    plan = build_plan(runs, H100)
    inputs = _inputs(model)
    want = evaluate(model, inputs)[model.outputs[0]]
    got = run_plan(plan, runs, inputs)[runs.outputs[0]]
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-10, atol=1e-9)


def test_a_skinny_matmul_split_in_wide_parts_computes_the_matmul_tile_by_tile():
    spec = DeviceSpec(num_sms=8, wgmma=True)
    model = _matmul(8, 4096, 256)
    runs = split_k(model, spec)
    plan = build_plan(runs, spec)
    parts = [t for t in plan.tiles if t["op"] == 0]
    assert len(parts) == 8 and {t["writes"][4] - t["writes"][3] for t in parts} == {SKINNY_PART_COLS}
    inputs = _inputs(model)
    want = evaluate(model, inputs)[model.outputs[0]]
    got = run_plan(plan, runs, inputs)[runs.outputs[0]]
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-10, atol=1e-9)


def test_a_split_transformer_block_computes_the_block_tile_by_tile():
    model = models.transformer_block(64, hidden=512, heads=4)
    runs = split_k(fuse(model), H100)
    assert any(o.kind == "split_sum" for o in runs.ops)
    inputs = _inputs(model, 1)
    for name, t in ((t.name, t) for t in model.tensors if t.producer is None and len(t.shape) == 2 and t.shape[0] > 64):
        inputs[name] = inputs[name] / np.sqrt(t.shape[0])  # weights as a model's, so softmax stays smooth
    want = evaluate(model, inputs)[model.outputs[0]]
    got = run_plan(build_plan(runs, H100), runs, inputs)[runs.outputs[0]]
    np.testing.assert_allclose(np.asarray(got).reshape(want.shape), want, rtol=1e-9, atol=1e-9)


def test_names_survive_the_split():
    model = fuse(models.transformer_block(128))
    runs = split_k(model, H100)
    assert {t.name for t in model.tensors} <= {t.name for t in runs.tensors}
    assert [runs.tensors[o].name for o in runs.outputs] == [model.tensors[o].name for o in model.outputs]
    for o in runs.ops:
        if o.kind == "split_sum":
            assert runs.tensors[o.inputs[0]].dtype == "fp32" and runs.tensors[o.inputs[0]].placement == "device"


@pytest.mark.parametrize(("dtype", "m", "n"), [("bf16", 1, 4096), ("fp16", 3, 1000), ("fp32", 1, 512),
                                                ("bf16", 8, 4096), ("fp16", 13, 1000)])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_90"])
def test_skinny_split_kernels_compile(arch, dtype, m, n):
    """A skinny matmul's parts on gemv.cuh (up to 4 rows) or gemv_mma.cuh (bf16/fp16 of more): fp32 sums, A's rows
    the whole K apart, whatever the arch."""
    pytest.importorskip("cupy", reason="the gpu extra (CuPy, NVRTC) is not installed")
    from ark_runtime.kernel.codegen import INCLUDE_DIR, generate
    from driver.gpu import compile

    model = _matmul(m, 16384, n, dtype)
    runs = split_k(model, H100)
    parts = next(o.attr("k_splits") for o in runs.ops if o.kind == "matmul")
    src = generate(runs, build_plan(runs, H100))
    assert f"ark::split_sum_tile<{parts}," in src.text and "float* po = " in src.text
    # the parts take the loop's mode: their weights (an input) load before the tile's waits
    assert f"(pa, pb, po, {n}, {16384 // parts}, 16384, r0 % {m}, c0, c1, smem, mode)" in src.text
    assert ("ark::gemv_mma_tile<" in src.text) == (m > 4)
    assert compile.cubin(src.text, arch, (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"


@pytest.mark.parametrize("tma", ["1", "0"])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_90"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_split_kernels_compile(arch, dtype, tma, monkeypatch):
    """Parts loading by TMA ($ARK_SM90_TMA=1) or by cp.async (0, and what auto picks: parts fill one wave at most)."""
    monkeypatch.setenv("ARK_SM90_TMA", tma)
    pytest.importorskip("cupy", reason="the gpu extra (CuPy, NVRTC) is not installed")
    from ark_runtime.kernel.codegen import INCLUDE_DIR, generate
    from driver.gpu import compile

    model = _matmul(100, 2048, 136, dtype)
    runs = split_k(model, H100)
    src = generate(runs, build_plan(runs, H100))
    assert "ark::split_sum_tile<2," in src.text
    if tma == "1":  # each part's loads address the whole of A and B by their k (maps over the whole matrices)
        mm = next(o for o in runs.ops if o.kind == "matmul")
        assert ", float>((const unsigned char*)(p.tensors + TENSOR_MAPS_AT)" in src.text
        assert [(m.tensor, m.rows, m.cols) for m in src.tensor_maps] == [(mm.inputs[0], 100, 2048),
                                                                          (mm.inputs[1], 2048, 136)]
    else:
        assert ", float>(pa, pb, po," in src.text and not src.tensor_maps
    assert compile.cubin(src.text, arch, (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"
