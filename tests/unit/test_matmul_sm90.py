"""The Hopper wgmma matmul tile without a GPU: where codegen and the tiling choose it (and agree), the switch that
turns it off, the sm_90a compile that CI would otherwise never see (ARK_REQUIRE_WGMMA makes a kernel without the
wgmma path a compile error), the sm_90 compile of the same kernel with its WMMA fallback, and which sources
driver/gpu/compile.py builds for sm_90a. The tile's numbers are checked on a GPU: tests/gpu/test_matmul_sm90.py."""

from __future__ import annotations

import pytest

from ark_runtime import models
from ark_runtime.fusion import fuse
from ark_runtime.kernel.codegen import INCLUDE_DIR, SM90_ARCH_MARK, generate, matmul_sm90_smem
from ark_runtime.model import Model
from ark_runtime.plan import build_plan
from ark_runtime.scheduler import DeviceSpec
from ark_runtime.tiling import SM90_ENV, matmul_block, sm90_matmul_block

cupy = pytest.importorskip("cupy", reason="the gpu extra (CuPy, NVRTC) is not installed")


def _generate(model: Model, sms: int):
    model = fuse(model)
    plan = build_plan(model, DeviceSpec(num_sms=sms))
    return model, plan, generate(model, plan)


def _two_matmuls(dtype: str) -> Model:
    """On 8 SMs: 128 x 256 wgmma tiles (600 rows, N = 520) and 128 x 128 ones (N = 136); every edge ragged."""
    m = Model(f"two-{dtype}")
    x = m.input("x", (2, 300, 136), dtype)
    h = m.gelu(m.matmul(x, m.input("w1", (136, 520), dtype)))
    m.output(m.matmul(h, m.input("w2", (520, 136), dtype)))
    return m


@pytest.mark.parametrize("m,n,k,dtype,sms,want", [
    (8192, 8192, 8192, "bf16", 132, (128, 256)),
    (8192, 8192, 8192, "fp16", 132, (128, 256)),
    (512, 4096, 1024, "bf16", 132, (128, 128)),  # 16 x 16 = too few 128 x 256 tiles for 132 SMs
    (600, 520, 136, "bf16", 8, (128, 256)),
    (8192, 8192, 8192, "fp32", 132, None),  # tensor-core types only
    (8192, 8190, 8192, "bf16", 132, None),  # N: 16-byte rows of B
    (8192, 8192, 8100, "bf16", 132, None),  # K: 16-byte rows of A
    (100, 8192, 8192, "bf16", 132, None),  # M below one 128-row tile
    (16, 8192, 8192, "bf16", 132, None),  # the skinny path's
    (128, 128, 4096, "bf16", 132, None),  # one tile on 132 SMs: the WMMA path cuts it finer
])
def test_where_the_wgmma_tile_applies(m, n, k, dtype, sms, want):
    assert sm90_matmul_block(m, n, k, dtype, sms) == want


def test_the_plan_cuts_what_the_kernel_computes():
    model, plan, src = _generate(_two_matmuls("bf16"), sms=8)
    mm = [op for op in model.ops if op.kind == "matmul"]
    assert [sm90_matmul_block(model.tensors[o.inputs[0]].rows, model.tensors[o.inputs[1]].cols,
                              model.tensors[o.inputs[0]].cols, "bf16", 8) for o in mm] == [(128, 256), (128, 128)]
    for op, (bm, bn) in zip(mm, [(128, 256), (128, 128)]):
        out = model.tensors[op.output]
        regions = sorted((t["writes"][1], t["writes"][3]) for t in plan.tiles if t["op"] == op.id)
        assert regions == [(r, c) for r in range(0, out.rows, bm) for c in range(0, out.cols, bn)]
    assert "ark::matmul_tile_sm90<__nv_bfloat16, 256, 4>" in src.text
    assert "ark::matmul_tile_sm90<__nv_bfloat16, 128, 6>" in src.text
    assert SM90_ARCH_MARK in src.text and "#define ARK_MIN_BLOCKS 1" in src.text
    assert src.smem_bytes == max(matmul_sm90_smem(256), matmul_sm90_smem(128))


def test_the_switch_turns_the_wgmma_tile_off(monkeypatch):
    monkeypatch.setenv(SM90_ENV, "0")
    assert sm90_matmul_block(8192, 8192, 8192, "bf16", 132) is None
    model, plan, src = _generate(models.named("matmul8192"), sms=132)
    assert "matmul_tile_sm90" not in src.text and SM90_ARCH_MARK not in src.text
    assert "__launch_bounds__(THREADS, ARK_MIN_BLOCKS)" in src.text and "#define ARK_MIN_BLOCKS 2" in src.text
    bm, bn = matmul_block(8192, 8192, 132)
    assert len(plan.tiles) == (8192 // bm) * (8192 // bn)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_wgmma_tile_compiles_for_sm90a_and_falls_back_on_sm90(dtype):
    from driver.gpu import compile

    _, _, src = _generate(_two_matmuls(dtype), sms=8)
    extra = (f"-I{INCLUDE_DIR}",)
    assert compile.cubin(src.text, arch="sm_90a", extra=(*extra, "-DARK_REQUIRE_WGMMA"))[:4] == b"\x7fELF"
    assert compile.cubin(src.text, arch="sm_90", extra=extra)[:4] == b"\x7fELF"  # the WMMA halves
    with pytest.raises(compile.CompileError, match="ARK_REQUIRE_WGMMA"):
        compile.cubin(src.text, arch="sm_90", extra=(*extra, "-DARK_REQUIRE_WGMMA"))


@pytest.mark.parametrize("name", ["matmul8192", "block-s512"])
def test_named_models_compile_for_sm90a(name):
    from driver.gpu import compile

    _, _, src = _generate(models.named(name), sms=132)
    assert compile.cubin(src.text, arch="sm_90a", extra=(f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"


def test_the_wgmma_tile_keeps_its_accumulators_in_registers():
    """ptxas on the sm_90a kernel: no spills (a spilled accumulator would also serialise the wgmma pipeline)."""
    from cupy.cuda import nvrtc

    from driver.gpu import compile

    _, _, src = _generate(models.named("matmul8192"), sms=132)
    prog = nvrtc.createProgram(compile._keyed(src.text), "matmul8192.cu", [], [])
    try:
        nvrtc.compileProgram(prog, [*compile.options((f"-I{INCLUDE_DIR}",)), "--gpu-architecture=sm_90a",
                                    "--ptxas-options=-v"])
        log = nvrtc.getProgramLog(prog)
    finally:
        nvrtc.destroyProgram(prog)
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log
    assert "Potential Performance Loss" not in log, log  # ptxas's note when it serialises wgmma


def test_only_marked_sources_are_built_for_sm90a_and_only_on_compute_capability_9_0():
    from driver.gpu import compile

    marked = f"{compile.ARCH_SPECIFIC_MARK}\nextern \"C\" __global__ void k() {{}}\n"
    assert compile.arch_specific(marked, "90") == "sm_90a"
    assert compile.arch_specific(marked, "80") is None and compile.arch_specific(marked, "100") is None
    assert compile.arch_specific("extern \"C\" __global__ void k() {}", "90") is None
    assert SM90_ARCH_MARK == compile.ARCH_SPECIFIC_MARK
