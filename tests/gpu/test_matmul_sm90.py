"""The Hopper wgmma matmul tile (include/ark/matmul_sm90.cuh) on an H100: the template alone, one CTA per tile, with
each loader (TMA and cp.async), in every block shape (128 or 64 rows; 256, 128 or 64 columns) at small and odd
shapes (edge rows, columns and K zero-filled and masked) in bf16 and fp16 against float64 NumPy; then models through
the Runtime, where codegen picks the tile; and timing prints (not assertions): 8192^3, and the medium matmuls of
mlp-b64 and block-s128. Skips without a compute capability 9.0 GPU.

Run: ./dev test tests/gpu/test_matmul_sm90.py -v -s   (-s shows the timing lines)"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ark_runtime.kernel.codegen import INCLUDE_DIR, headers_digest
from ark_runtime.ops.matmul import sm90_stage_bytes, sm90_stages
from ark_runtime.model import Model
from ark_runtime.ops.matmul import SM90_BLOCKS

pytestmark = pytest.mark.gpu
TOL = {"bf16": 1e-2, "fp16": 2e-3}  # of the output's scale: bf16 keeps 8 bits, fp16 11
CTYPE = {"bf16": "__nv_bfloat16", "fp16": "__half"}


@pytest.fixture(scope="module")
def h100(gpu):
    import cupy

    cc = cupy.cuda.Device().compute_capability
    if cc != "90":
        pytest.skip(f"the wgmma tile needs compute capability 9.0 (sm_90a); this GPU is {cc}")


def _to_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round to nearest even, as the GPU's conversions do."""
    if dtype == "fp16":
        return np.ascontiguousarray(x, np.float16).view(np.uint16)
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "fp16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _smem(bm: int, bn: int, stages: int) -> int:
    return stages * sm90_stage_bytes(bm, bn) + 1024  # matmul_sm90_smem<BM, BN, STAGES>()


LOADERS = ("tma", "cp.async")


def _kernel(dtype: str, bm: int, bn: int, stages: int, loader: str):
    """matmul_tile_sm90 (cp.async) or matmul_tile_sm90_tma alone: CTA i computes tile i (bm x bn, row-major over the
    tiles); the TMA tile reads the tensor maps at `maps` (A's, then B's)."""
    from driver.gpu import compile

    t = CTYPE[dtype]
    bounds = f"r0, min(r0 + {bm}, m), c0, min(c0 + {bn}, n), smem"
    call = (f"ark::matmul_tile_sm90_tma<{t}, {bm}, {bn}, {stages}>(maps, maps + 128, out, m, n, k, 0, {bounds});"
            if loader == "tma" else f"ark::matmul_tile_sm90<{t}, {bm}, {bn}, {stages}>(a, b, out, m, n, k, {bounds});")
    src = f"""// ark headers {headers_digest()} (compile.load caches by source: a header edit must change it)
#define ARKDMA_ARCH_SPECIFIC 1
#include <ark/matmul_sm90.cuh>
extern "C" __global__ void __launch_bounds__(256, 1) tile(const {t}* a, const {t}* b, {t}* out, int m, int n, int k,
                                                          const unsigned char* maps) {{
  extern __shared__ __align__(128) unsigned char smem[];
  static_assert(ark::matmul_sm90_smem<{bm}, {bn}, {stages}>() == {_smem(bm, bn, stages)}, "the test's _smem");
  const int tn = (n + {bn} - 1) / {bn};
  const int r0 = blockIdx.x / tn * {bm}, c0 = blockIdx.x % tn * {bn};
  {call}
}}
"""
    # ARK_REQUIRE_WGMMA: a compile error, not a silent fallback, if this were not built for sm_90a
    fn = compile.load(src, extra=(f"-I{INCLUDE_DIR}", "-DARK_REQUIRE_WGMMA")).get_function("tile")
    fn.max_dynamic_shared_size_bytes = _smem(bm, bn, stages)
    return fn


def _run_tile(dtype: str, bm: int, bn: int, stages: int, a_bits: np.ndarray, b_bits: np.ndarray,
              loader: str = "tma") -> np.ndarray:
    """The kernel's output bits, (m + 1) x n: row m must stay 0xFFFF (no store past the last row)."""
    import cupy

    from driver.gpu.tensor_maps import encode

    (m, k), n = a_bits.shape, b_bits.shape[1]
    a, b = cupy.asarray(a_bits), cupy.asarray(b_bits)
    out = cupy.full((m + 1, n), 0xFFFF, cupy.uint16)  # NaN everywhere; row m guards against stores past the end
    maps = cupy.asarray(np.concatenate([encode(a.data.ptr, m, k, bm, 64), encode(b.data.ptr, k, n, 64, 64)]))
    fn = _kernel(dtype, bm, bn, stages, loader)
    tiles = -(-m // bm) * -(-n // bn)
    fn((tiles,), (256,), (a, b, out, np.int32(m), np.int32(n), np.int32(k), maps), shared_mem=_smem(bm, bn, stages))
    cupy.cuda.Device().synchronize()
    return out.get()


def _inputs(dtype: str, m: int, n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (_to_bits(rng.standard_normal((m, k)), dtype), _to_bits(rng.standard_normal((k, n)) / math.sqrt(k), dtype))


def _mismatch(got_bits: np.ndarray, want: np.ndarray, dtype: str, bm: int, bn: int) -> str | None:
    """None when the output matches float64 within TOL; else where it does not (the place of the bad ones in the
    tile tells a layout mistake (rows of a warp or warpgroup, columns of a 64-column panel, the half of the columns
    a 64-row tile's warpgroup stores) from a pipeline one (everywhere, a little off))."""
    m = want.shape[0]
    if not (got_bits[m] == 0xFFFF).all():
        return "the tile stored past the last row"
    got = _from_bits(got_bits[:m], dtype)
    nan = np.argwhere(np.isnan(got))
    if len(nan):
        return f"{len(nan)} outputs NaN (never written, or NaN computed), first {nan[:4].tolist()}"
    scale = max(1.0, float(np.abs(want).max()))
    diff = np.abs(got - want) / scale
    if diff.max() <= TOL[dtype]:
        return None
    worst = np.unravel_index(int(diff.argmax()), diff.shape)
    bad = np.argwhere(diff > TOL[dtype])
    return (f"off by {diff.max():.3g} of scale {scale:.3g} at {worst} (got {got[worst]:.5g}, want {want[worst]:.5g}); "
            f"{len(bad)} of {diff.size} off, first {bad[:6].tolist()}; bad rows % {bm}: "
            f"{np.unique(bad[:, 0] % bm)[:24].tolist()}, bad columns % {bn}: {np.unique(bad[:, 1] % bn)[:24].tolist()}")


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("bm,bn", SM90_BLOCKS)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("m,n,k", [(128, 128, 64), (256, 384, 192), (200, 296, 136), (1000, 1000, 1000),
                                   (5, 200, 24), (130, 136, 8), (384, 512, 4096)])
def test_the_tile_matches_float64(h100, dtype, bm, bn, m, n, k, loader):
    """Each block with its deepest ring (more slices than K has, at small K)."""
    stages = sm90_stages(bm, bn, 1 << 20)
    a_bits, b_bits = _inputs(dtype, m, n, k)
    want = _from_bits(a_bits, dtype) @ _from_bits(b_bits, dtype)
    bad = _mismatch(_run_tile(dtype, bm, bn, stages, a_bits, b_bits, loader), want, dtype, bm, bn)
    assert bad is None, f"{m}x{n}x{k} {dtype} {bm}x{bn}, {stages} stages, {loader}: {bad}"


@pytest.mark.parametrize("bm,bn", SM90_BLOCKS)
def test_both_loaders_give_the_same_bits(h100, bm, bn):
    """TMA and cp.async fill the ring alike (zeros past every edge), so the sums are the same to the bit."""
    a_bits, b_bits = _inputs("bf16", 333, 520, 1000, seed=7)
    stages = sm90_stages(bm, bn, 1000)
    tma, cp = (_run_tile("bf16", bm, bn, stages, a_bits, b_bits, loader) for loader in LOADERS)
    assert np.array_equal(tma, cp)


GRID_M, GRID_N = (17, 64, 100, 128, 130, 512), (64, 136, 1024)


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("k", [64, 1000, 4096])
@pytest.mark.parametrize("bm,bn", SM90_BLOCKS)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_block_on_the_medium_grid(h100, dtype, bm, bn, k, loader):
    """M in GRID_M times N in GRID_N (few of them block multiples), with the ring codegen gives this K."""
    stages = sm90_stages(bm, bn, k)
    a_all, b_all = _inputs(dtype, max(GRID_M), max(GRID_N), k, seed=k)
    want_all = _from_bits(a_all, dtype) @ _from_bits(b_all, dtype)
    fails = []
    for m in GRID_M:
        for n in GRID_N:
            a_bits, b_bits = np.ascontiguousarray(a_all[:m]), np.ascontiguousarray(b_all[:, :n])
            bad = _mismatch(_run_tile(dtype, bm, bn, stages, a_bits, b_bits, loader), want_all[:m, :n], dtype, bm, bn)
            if bad:
                fails.append(f"{m}x{n}x{k}: {bad}")
    assert not fails, f"{dtype} {bm}x{bn}, {stages} stages, {loader}:\n" + "\n".join(fails)


def _check_model(model: Model, **kw):
    from ark_runtime.host_values import from_bits, to_bits
    from ark_runtime.reference import evaluate
    from ark_runtime.runtime import Runtime

    rng = np.random.default_rng(1)
    weights = {o.inputs[1] for o in model.ops if o.kind == "matmul"}
    inputs = {}
    for t in model.tensors:
        if t.producer is None:
            inputs[t.name] = rng.standard_normal(t.shape) / (math.sqrt(t.rows) if t.id in weights else 1.0)
    by_name = {t.name: t for t in model.tensors}
    rounded = {k: from_bits(by_name[k], to_bits(by_name[k], v)).astype(np.float64) for k, v in inputs.items()}
    want = evaluate(model, rounded)
    with Runtime(model, **kw) as rt:
        for k, v in inputs.items():
            rt.set(k, v)
        rt.run(2)
        rt.wait()
        for tid in model.outputs:
            t = model.tensors[tid]
            got = rt.get(t.name).astype(np.float64)
            scale = max(1.0, float(np.abs(want[tid]).max()))
            err = float((np.abs(got - want[tid]) / scale).max())
            assert err <= TOL[t.dtype] * 2, f"{model.name}: {t.name} off by {err:.3g} of its scale {scale:.3g}"
        return rt.source.text


@pytest.mark.parametrize("dtype,shape,sms,block", [
    ("bf16", (300, 136, 520), 8, (128, 256)),  # 3 x 3 tiles of 128 x 256, every edge ragged
    ("fp16", (256, 192, 384), 6, (128, 128)),  # 2 x 3 tiles of 128 x 128 (on 16 SMs, 64 x 64 fills them)
    ("bf16", (2, 260, 1024, 264), 8, (128, 256)),  # batch folded into rows; N not a multiple of 128
    ("bf16", (64, 4096, 1024), 132, (64, 64)),  # M = 64: 16 tiles of 64 x 64
    ("fp16", (2, 50, 1000, 520), 8, (128, 64)),  # 100 rows (batch 2 x 50) in one 128-row block; N ragged
    ("bf16", (50, 520, 1000), 8, (64, 128)),  # 50 rows: the warpgroups split K and add their sums
])
@pytest.mark.parametrize("loader", LOADERS)
def test_models_run_the_wgmma_tile_through_the_runtime(h100, dtype, shape, sms, block, loader, monkeypatch):
    from driver.gpu import compile

    monkeypatch.setenv("ARK_SM90_TMA", "1" if loader == "tma" else "0")
    m = Model(f"sm90-{dtype}")
    *lead, k, n = shape
    x = m.input("x", (*lead, k), dtype)
    m.output(m.matmul(x, m.input("w", (k, n), dtype)))
    text = _check_model(m, sms=sms)
    tile = "matmul_tile_sm90_tma" if loader == "tma" else "matmul_tile_sm90"
    assert f"{tile}<{CTYPE[dtype]}, {block[0]}, {block[1]}," in text
    assert compile.arch_specific(text, "90") == "sm_90a"


def _grid(k: int, dtype: str) -> Model:
    """GRID_M x GRID_N, one matmul each, in one model."""
    m = Model(f"grid-k{k}-{dtype}")
    xs = [m.input(f"x{rows}", (rows, k), dtype) for rows in GRID_M]
    ws = [m.input(f"w{cols}", (k, cols), dtype) for cols in GRID_N]
    for x in xs:
        for w in ws:
            m.output(m.matmul(x, w))
    return m


@pytest.mark.parametrize("sms", [None, 2])
@pytest.mark.parametrize("k", [64, 1000, 4096])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_medium_grid_through_the_runtime(h100, dtype, k, sms):
    """The grid as one model: on all SMs every matmul takes 64 x 64 blocks, on 2 SMs the six blocks all occur."""
    text = _check_model(_grid(k, dtype), **({"sms": sms} if sms else {}))
    want = set(SM90_BLOCKS) if sms == 2 else {(64, 64)}
    assert {b for b in SM90_BLOCKS for tile in ("matmul_tile_sm90<", "matmul_tile_sm90_tma<")
            if f"{tile}{CTYPE[dtype]}, {b[0]}, {b[1]}," in text} == want


def test_a_block_with_the_wgmma_tile_beside_other_ops(h100):
    """matmul -> gelu -> matmul with a residual add: the wgmma tiles' dependencies and shared memory next to the
    other templates in one kernel."""
    m = Model("sm90-mlp")
    x = m.input("x", (384, 256), "bf16")
    h = m.gelu(m.matmul(x, m.input("w1", (256, 1024), "bf16")))
    m.output(m.add(x, m.matmul(h, m.input("w2", (1024, 256), "bf16"))))
    text = _check_model(m, sms=6)
    assert "matmul_tile_sm90" in text


def test_a_shape_the_tile_cannot_take_runs_the_wmma_tile(h100):
    m = Model("sm90-n300")  # N = 300 is not a multiple of 8: no 16-byte rows
    x = m.input("x", (200, 136), "bf16")
    m.output(m.matmul(x, m.input("w", (136, 300), "bf16")))
    assert "matmul_tile_sm90" not in _check_model(m, sms=4)


def test_the_switch_turns_the_wgmma_tile_off(h100, monkeypatch):
    monkeypatch.setenv("ARK_SM90_MATMUL", "0")
    m = Model("sm90-off")
    x = m.input("x", (300, 136), "bf16")
    m.output(m.matmul(x, m.input("w", (136, 520), "bf16")))
    text = _check_model(m, sms=8)
    assert "matmul_tile_sm90" not in text and "ARKDMA_ARCH_SPECIFIC" not in text


def test_timing_8192(h100):
    """Not an assertion: TFLOP/s of the tile alone (2048 CTAs), of the loop kernel's matmul8192 and of
    torch.matmul, printed (-s), with a few rows of the loop kernel's result checked."""
    import cupy

    n = 8192
    flops = 2.0 * n ** 3
    lines = []
    rng = np.random.default_rng(2)
    a_bits = _to_bits(rng.standard_normal((n, n), np.float32), "bf16")
    b_bits = _to_bits(rng.standard_normal((n, n), np.float32) / math.sqrt(n), "bf16")

    # the template alone, one plain launch of 64 x 32 CTAs, with each loader
    from driver.gpu.tensor_maps import encode

    a, b = cupy.asarray(a_bits), cupy.asarray(b_bits)
    out = cupy.zeros((n, n), cupy.uint16)
    maps = cupy.asarray(np.concatenate([encode(a.data.ptr, n, n, 128, 64), encode(b.data.ptr, n, n, 64, 64)]))
    stages = sm90_stages(128, 256, n)
    args = (a, b, out, np.int32(n), np.int32(n), np.int32(n), maps)
    for loader in LOADERS:
        fn = _kernel("bf16", 128, 256, stages, loader)
        fn((n // 128 * n // 256,), (256,), args, shared_mem=_smem(128, 256, stages))
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(5):
            fn((n // 128 * n // 256,), (256,), args, shared_mem=_smem(128, 256, stages))
        end.record()
        end.synchronize()
        ms = cupy.cuda.get_elapsed_time(start, end) / 5
        lines.append(f"the tile alone ({loader}, plain launch): {ms:.3f} ms, {flops / ms / 1e9:.0f} TFLOP/s")

    try:
        import torch

        ta, tb = torch.randn(n, n, device="cuda", dtype=torch.bfloat16), torch.randn(n, n, device="cuda",
                                                                                    dtype=torch.bfloat16)
        torch.matmul(ta, tb)
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(5):
            torch.matmul(ta, tb)
        e1.record()
        torch.cuda.synchronize()
        tms = e0.elapsed_time(e1) / 5
        lines.append(f"torch.matmul: {tms:.3f} ms, {flops / tms / 1e9:.0f} TFLOP/s")
        del ta, tb
        torch.cuda.empty_cache()
    except ImportError:
        tms = None
    del a, b, out, maps
    cupy.get_default_memory_pool().free_all_blocks()

    # the loop kernel (codegen picks 128 x 256 wgmma tiles for matmul8192)
    from ark_runtime import models
    from ark_runtime.runtime import Runtime

    model = models.matmul(n)
    with Runtime(model) as rt:
        assert "matmul_tile_sm90_tma<__nv_bfloat16, 128, 256," in rt.source.text
        rt.set("a", _from_bits(a_bits, "bf16").astype(np.float32))
        rt.set("b", _from_bits(b_bits, "bf16").astype(np.float32))
        rt.run(12)
        rt.wait(timeout=120)
        per = np.diff(rt.iteration_ns()[-11:]) / 1e6
        lms = float(np.median(per))
        lines.append(f"loop kernel matmul8192: {lms:.3f} ms median of {len(per)} (p10 {np.percentile(per, 10):.3f}, "
                     f"p90 {np.percentile(per, 90):.3f}), {flops / lms / 1e9:.0f} TFLOP/s"
                     + (f", {tms / lms:.0%} of torch.matmul" if tms else "")
                     + f"; {rt._fn.num_regs} registers a thread")
        got = rt.get(model.tensors[model.outputs[0]].name)
    rows = [0, 127, 128, 4095, 8191]
    want = _from_bits(a_bits[rows], "bf16") @ _from_bits(b_bits, "bf16")
    err = float(np.abs(got[rows] - want).max() / max(1.0, np.abs(want).max()))
    lines.append(f"rows {rows} of the loop kernel's result off by {err:.3g} of their scale")
    print("\n" + "\n".join(lines))
    assert err <= TOL["bf16"], lines[-1]


def _torch_ms(fn, reps: int = 50) -> float | None:
    """Mean milliseconds of fn() on the GPU by CUDA events, or None without PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(reps):
        fn()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) / reps


def _time_model(model: Model, iterations: int = 40, **kw) -> tuple[float, str, float, str]:
    """The loop kernel's median milliseconds per iteration, its profile table, the outputs' worst error against
    float64 (of the output's scale) and the kernel's source."""
    from ark_runtime.host_values import from_bits, to_bits
    from ark_runtime.reference import evaluate
    from ark_runtime.runtime import Runtime

    rng = np.random.default_rng(3)
    weights = {o.inputs[1] for o in model.ops if o.kind == "matmul"}
    inputs = {t.name: (rng.standard_normal(t.shape, np.float32) / np.float32(math.sqrt(t.rows) if t.id in weights
                                                                             else 1.0))
              for t in model.tensors if t.producer is None}
    by_name = {t.name: t for t in model.tensors}
    want = evaluate(model, {k: from_bits(by_name[k], to_bits(by_name[k], v)).astype(np.float64)
                            for k, v in inputs.items()})
    with Runtime(model, **kw) as rt:
        for k, v in inputs.items():
            rt.set(k, v)
        rt.run(iterations)
        rt.wait(timeout=120)
        per = np.diff(rt.iteration_ns()[-(iterations - 5):]) / 1e6
        table = rt.profile().table()
        err = 0.0
        for tid in model.outputs:
            t = model.tensors[tid]
            scale = max(1.0, float(np.abs(want[tid]).max()))
            err = max(err, float((np.abs(rt.get(t.name).astype(np.float64) - want[tid]) / scale).max()))
        return float(np.median(per)), table, err, rt.source.text


@pytest.mark.parametrize("m,k,n", [(64, 4096, 16384), (128, 1024, 1024)])
def test_timing_medium(h100, m, k, n):
    """Not an assertion on time: one matmul of mlp-b64 (M = 64) or of block-s128's projections (M = 128) through
    the loop kernel (median time per iteration, its block, the profile), and torch.matmul at the same shape, printed
    (-s); the result is checked against float64."""
    import re

    model = Model(f"mm{m}x{k}x{n}")
    model.output(model.matmul(model.input("x", (m, k), "bf16"), model.input("w", (k, n), "bf16")))
    ms, table, err, text = _time_model(model)
    # (true: the epilogue staged; float: split K)
    block = re.search(r"matmul_tile_sm90(?:_tma)?<__nv_bfloat16, (\d+), (\d+), (\d+)(?:, (?:true|false))?(, float)?>",
                      text)
    flops, nbytes = 2.0 * m * k * n, 2.0 * (m * k + k * n + m * n)
    lines = [f"{m}x{k} @ {k}x{n} bf16, loop kernel: {ms * 1e3:.1f} us per iteration, {flops / ms / 1e9:.1f} TFLOP/s, "
             f"{nbytes / ms / 1e6:.0f} GB/s; block {block.group(1)} x {block.group(2)}, {block.group(3)} stages"
             f"{', K split (split_k.py)' if block.group(4) else ''}"
             if block else f"{m}x{k} @ {k}x{n}: no wgmma tile in the kernel"]
    try:
        import torch

        ta = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        tb = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        tms = _torch_ms(lambda: torch.matmul(ta, tb))
        lines.append(f"torch.matmul: {tms * 1e3:.1f} us, {flops / tms / 1e9:.1f} TFLOP/s ({tms / ms:.0%} of the loop "
                     "kernel's speed)")
    except ImportError:
        pass
    lines += [table, f"result off by {err:.3g} of its scale"]
    print("\n" + "\n".join(lines))
    assert block and err <= TOL["bf16"] * 2, lines[-1]


def test_timing_mlp_b64(h100):
    """Not an assertion on time: the whole mlp-b64 (4096 -> 16384 -> 4096, batch 64, 256 MiB of weights) through the
    loop kernel, and the same in PyTorch, printed (-s); the result is checked against float64."""
    from ark_runtime import models

    ms, table, err, _ = _time_model(models.named("mlp-b64"), iterations=30)
    flops, weights = 2.0 * 2 * 64 * 4096 * 16384, 2.0 * 2 * 4096 * 16384
    lines = [f"mlp-b64, loop kernel: {ms * 1e3:.1f} us per iteration, {flops / ms / 1e9:.1f} TFLOP/s, weights at "
             f"{weights / ms / 1e6:.0f} GB/s"]
    try:
        import torch

        x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
        w1 = torch.randn(4096, 16384, device="cuda", dtype=torch.bfloat16)
        w2 = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
        tms = _torch_ms(lambda: torch.nn.functional.gelu(x @ w1) @ w2)
        lines.append(f"PyTorch: {tms * 1e3:.1f} us ({tms / ms:.0%} of the loop kernel's speed)")
        del x, w1, w2
        torch.cuda.empty_cache()
    except ImportError:
        pass
    lines += [table, f"result off by {err:.3g} of its scale"]
    print("\n" + "\n".join(lines))
    assert err <= TOL["bf16"] * 2, lines[-1]


@pytest.mark.parametrize("block", SM90_BLOCKS)
@pytest.mark.parametrize("loader", LOADERS)
def test_fused_epilogues_in_every_block(h100, block, loader):
    """A bias with erf-GELU, and a residual, fused into the stores of each block with ragged rows and columns: the
    epilogue staged through the ring (the warpgroups' sums added there first where BM = 64)."""
    m = Model(f"sm90-epilogue-{block[0]}x{block[1]}")
    x = m.input("x", (200, 136), "bf16")
    h = m.unary("gelu_erf", m.add(m.matmul(x, m.input("w", (136, 520), "bf16")), m.input("b", (520,), "bf16")))
    r = m.add(m.matmul(x, m.input("w2", (136, 520), "bf16")), m.input("res", (200, 520), "bf16"))
    m.output(h, r)
    chosen = {"block": block, "loader": loader}
    text = _check_model(m, sms=8, split_k=False, knobs={h.name: chosen, r.name: chosen})
    tile = "matmul_tile_sm90_tma" if loader == "tma" else "matmul_tile_sm90"
    assert text.count(f"{tile}<__nv_bfloat16, {block[0]}, {block[1]},") == 2
