"""The Hopper wgmma matmul tile (include/ark/matmul_sm90.cuh) on an H100: the template alone, one CTA per tile, at
small and odd shapes (edge rows, columns and K zero-filled and masked) in bf16 and fp16 against float64 NumPy; then
models through the Runtime, where codegen picks the tile; and a timing print at 8192^3 (not an assertion). Skips
without a compute capability 9.0 GPU.

Run: ./dev test tests/gpu/test_matmul_sm90.py -v -s   (-s shows the TFLOP/s lines)"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ark_runtime.kernel.codegen import INCLUDE_DIR, SM90_STAGES, headers_digest, matmul_sm90_smem
from ark_runtime.model import Model

pytestmark = pytest.mark.gpu
TOL = {"bf16": 1e-2, "fp16": 2e-3}  # of the output's scale: bf16 keeps 8 bits, fp16 11
CTYPE = {"bf16": "__nv_bfloat16", "fp16": "__half"}


@pytest.fixture(scope="module")
def h100():
    from driver.gpu.launch import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"needs a CUDA GPU: {reason}")
    from host import native

    if native.unavailable_reason() is None and native.cuda_probe().name.startswith("Fake CUDA device"):
        pytest.skip("needs a real GPU to run kernels")
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


def _kernel(dtype: str, bn: int):
    """matmul_tile_sm90 alone: CTA i computes tile i (128 x bn, row-major over the tiles)."""
    from driver.gpu import compile

    t, stages = CTYPE[dtype], SM90_STAGES[bn]
    src = f"""// ark headers {headers_digest()} (compile.load caches by source: a header edit must change it)
#define ARKDMA_ARCH_SPECIFIC 1
#include <ark/matmul_sm90.cuh>
extern "C" __global__ void __launch_bounds__(256, 1) tile(const {t}* a, const {t}* b, {t}* out, int m, int n, int k) {{
  extern __shared__ __align__(128) unsigned char smem[];
  const int tn = (n + {bn} - 1) / {bn};
  const int r0 = blockIdx.x / tn * 128, c0 = blockIdx.x % tn * {bn};
  ark::matmul_tile_sm90<{t}, {bn}, {stages}>(a, b, out, m, n, k, r0, min(r0 + 128, m), c0, min(c0 + {bn}, n), smem);
}}
"""
    # ARK_REQUIRE_WGMMA: a compile error, not a silent fallback, if this were not built for sm_90a
    fn = compile.load(src, extra=(f"-I{INCLUDE_DIR}", "-DARK_REQUIRE_WGMMA")).get_function("tile")
    fn.max_dynamic_shared_size_bytes = matmul_sm90_smem(bn)
    return fn


def _run_tile(dtype: str, bn: int, m: int, n: int, k: int, seed: int = 0):
    import cupy

    rng = np.random.default_rng(seed)
    a_bits = _to_bits(rng.standard_normal((m, k)), dtype)
    b_bits = _to_bits(rng.standard_normal((k, n)) / math.sqrt(k), dtype)
    a, b = cupy.asarray(a_bits), cupy.asarray(b_bits)
    out = cupy.full((m + 1, n), 0xFFFF, cupy.uint16)  # NaN everywhere; row m guards against stores past the end
    fn = _kernel(dtype, bn)
    tiles = -(-m // 128) * -(-n // bn)
    fn((tiles,), (256,), (a, b, out, np.int32(m), np.int32(n), np.int32(k)), shared_mem=matmul_sm90_smem(bn))
    cupy.cuda.Device().synchronize()
    got = out.get()
    want = _from_bits(a_bits, dtype) @ _from_bits(b_bits, dtype)
    return got, want


@pytest.mark.parametrize("bn", [128, 256])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("m,n,k", [(128, 128, 64), (256, 384, 192), (200, 296, 136), (1000, 1000, 1000),
                                   (5, 200, 24), (130, 136, 8), (384, 512, 4096)])
def test_the_tile_matches_float64(h100, dtype, bn, m, n, k):
    got, want = _run_tile(dtype, bn, m, n, k)
    assert (got[m] == 0xFFFF).all(), "the tile stored past the last row"
    got = _from_bits(got[:m], dtype)
    nan = np.argwhere(np.isnan(got))
    assert not len(nan), f"{len(nan)} outputs NaN (never written, or NaN computed), first {nan[:4].tolist()}"
    scale = max(1.0, float(np.abs(want).max()))
    diff = np.abs(got - want) / scale
    if diff.max() > TOL[dtype]:
        worst = np.unravel_index(int(diff.argmax()), diff.shape)
        bad = np.argwhere(diff > TOL[dtype])
        # where in the tile the bad ones sit tells a layout mistake (rows of a warp or warpgroup, columns of a
        # 64-column panel, ...) from a pipeline one (everywhere, a little off)
        pytest.fail(f"{m}x{n}x{k} {dtype} BN={bn}: off by {diff.max():.3g} of scale {scale:.3g} at {worst} (got "
                    f"{got[worst]:.5g}, want {want[worst]:.5g}); {len(bad)} of {diff.size} off, first "
                    f"{bad[:6].tolist()}; bad rows % 128: {np.unique(bad[:, 0] % 128)[:24].tolist()}, bad columns "
                    f"% {bn}: {np.unique(bad[:, 1] % bn)[:24].tolist()}")


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


@pytest.mark.parametrize("dtype,shape,sms,bn", [
    ("bf16", (300, 136, 520), 8, 256),  # 3 x 3 tiles of 128 x 256, every edge ragged
    ("fp16", (256, 192, 384), 16, 128),  # 2 x 3 tiles of 128 x 128
    ("bf16", (2, 260, 1024, 264), 8, 256),  # batch folded into rows; N not a multiple of 128
])
def test_models_run_the_wgmma_tile_through_the_runtime(h100, dtype, shape, sms, bn):
    from driver.gpu import compile

    m = Model(f"sm90-{dtype}")
    *lead, k, n = shape
    x = m.input("x", (*lead, k), dtype)
    m.output(m.matmul(x, m.input("w", (k, n), dtype)))
    text = _check_model(m, sms=sms)
    assert f"matmul_tile_sm90<{CTYPE[dtype]}, {bn}," in text
    assert compile.arch_specific(text, "90") == "sm_90a"


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

    # the template alone, one plain launch of 64 x 32 CTAs
    a, b = cupy.asarray(a_bits), cupy.asarray(b_bits)
    out = cupy.zeros((n, n), cupy.uint16)
    fn = _kernel("bf16", 256)
    args = (a, b, out, np.int32(n), np.int32(n), np.int32(n))
    fn((n // 128 * n // 256,), (256,), args, shared_mem=matmul_sm90_smem(256))
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(5):
        fn((n // 128 * n // 256,), (256,), args, shared_mem=matmul_sm90_smem(256))
    end.record()
    end.synchronize()
    ms = cupy.cuda.get_elapsed_time(start, end) / 5
    lines.append(f"matmul_tile_sm90 alone (plain launch): {ms:.3f} ms, {flops / ms / 1e9:.0f} TFLOP/s")

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
    del a, b, out
    cupy.get_default_memory_pool().free_all_blocks()

    # the loop kernel (codegen picks 128 x 256 wgmma tiles for matmul8192)
    from ark_runtime import models
    from ark_runtime.runtime import Runtime

    model = models.matmul(n)
    with Runtime(model) as rt:
        assert "matmul_tile_sm90<__nv_bfloat16, 256," in rt.source.text
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
