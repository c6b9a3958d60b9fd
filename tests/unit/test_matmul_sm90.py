"""The Hopper wgmma matmul tile without a GPU: where codegen and the tiling choose it (and agree), the switch that
turns it off, the tensor maps its TMA loads read (and the switch back to cp.async loads), the sm_90a compile that
CI would otherwise never see (ARK_REQUIRE_WGMMA makes a kernel without the wgmma path a compile error), the sm_90
compile of the same kernel with its WMMA fallback, and which sources driver/gpu/compile.py builds for sm_90a. The
tile's numbers are checked on a GPU: tests/gpu/test_matmul_sm90.py."""

from __future__ import annotations

import pytest

from ark_runtime import models
from ark_runtime.fusion import fuse
from ark_runtime.kernel.codegen import INCLUDE_DIR, MAPS_PER_OP, SM90_ARCH_MARK, TensorMapSpec, generate
from ark_runtime.ops.matmul import SM90_TMA_ENV, matmul_sm90_smem, sm90_stages
from ark_runtime.model import Model
from ark_runtime.plan import build_plan
from ark_runtime.scheduler import DeviceSpec
from ark_runtime.ops.matmul import SM90_BLOCKS, SM90_ENV, SM90_FILL, matmul_block, sm90_matmul_block

cupy = pytest.importorskip("cupy", reason="the gpu extra (CuPy, NVRTC) is not installed")


@pytest.fixture(params=["tma", "cp.async"])
def loader(request, monkeypatch):
    """Both ways the wgmma tile loads its slices: TMA (the default) and cp.async ($ARK_SM90_TMA=0)."""
    monkeypatch.setenv(SM90_TMA_ENV, "1" if request.param == "tma" else "0")
    return request.param


def _tile(loader: str) -> str:
    return "ark::matmul_tile_sm90_tma" if loader == "tma" else "ark::matmul_tile_sm90"


def _generate(model: Model, sms: int):
    model = fuse(model)
    plan = build_plan(model, DeviceSpec(num_sms=sms))
    return model, plan, generate(model, plan)


def _ptxas_log(text: str, name: str) -> str:
    """NVRTC's log of compiling `text` for sm_90a with ptxas's report (registers, spills) in it."""
    from cupy.cuda import nvrtc

    from driver.gpu import compile

    prog = nvrtc.createProgram(compile._keyed(text), f"{name}.cu", [], [])
    try:
        nvrtc.compileProgram(prog, [*compile.options((f"-I{INCLUDE_DIR}",)), "--gpu-architecture=sm_90a",
                                    "--ptxas-options=-v"])
        return nvrtc.getProgramLog(prog)
    finally:
        nvrtc.destroyProgram(prog)


def _two_matmuls(dtype: str) -> Model:
    """On 8 SMs: 128 x 256 wgmma tiles (600 rows, N = 520) and 128 x 128 ones (N = 136); every edge ragged."""
    m = Model(f"two-{dtype}")
    x = m.input("x", (2, 300, 136), dtype)
    h = m.gelu(m.matmul(x, m.input("w1", (136, 520), dtype)))
    m.output(m.matmul(h, m.input("w2", (520, 136), dtype)))
    return m


def _grid(k: int, dtype: str = "bf16") -> Model:
    """Every M in {17, 64, 100, 128, 130, 512} times every N in {64, 136, 1024}, one matmul each: on 2 SMs all six
    blocks of SM90_BLOCKS are chosen, most edges ragged."""
    m = Model(f"grid-k{k}-{dtype}")
    xs = [m.input(f"x{rows}", (rows, k), dtype) for rows in (17, 64, 100, 128, 130, 512)]
    ws = [m.input(f"w{cols}", (k, cols), dtype) for cols in (64, 136, 1024)]
    for x in xs:
        for w in ws:
            m.output(m.matmul(x, w))
    return m


@pytest.mark.parametrize("m,n,k,dtype,sms,want", [
    (8192, 8192, 8192, "bf16", 132, (128, 256)),
    (8192, 8192, 8192, "fp16", 132, (128, 256)),
    (512, 4096, 1024, "bf16", 132, (128, 128)),  # 16 x 16 = too few 128 x 256 tiles for 132 SMs
    (600, 520, 136, "bf16", 8, (128, 256)),
    (8192, 8192, 8192, "fp32", 132, None),  # tensor-core types only
    (8192, 8190, 8192, "bf16", 132, None),  # N: 16-byte rows of B
    (8192, 8192, 8100, "bf16", 132, None),  # K: 16-byte rows of A
    (4, 8192, 8192, "bf16", 132, None),  # up to 16 rows the weight-streaming tiles' (ops/matmul.py's skinny)
    (5, 8192, 8192, "bf16", 132, None),
    (16, 16384, 4096, "bf16", 132, None),
    (17, 8192, 8192, "bf16", 132, (64, 64)),  # 128 tiles of 64 x 64; a 128-row block would be mostly zeros
    (100, 8192, 8192, "bf16", 132, (128, 64)),  # 128 tiles; of equal areas the taller
    (64, 16384, 4096, "bf16", 132, (64, 128)),  # mlp-b64's first matmul: 128 tiles
    (64, 4096, 16384, "bf16", 132, (64, 64)),  # ... its second: 64 tiles, the smallest block
    (64, 65536, 4096, "bf16", 132, (64, 256)),
    (128, 1024, 1024, "bf16", 132, (64, 64)),  # block-s128's projections: 32 tiles, none fills
    (128, 8192, 1024, "bf16", 132, (128, 64)),
    (512, 1024, 1024, "bf16", 132, (64, 64)),  # block-s512's: 128 tiles
    (128, 128, 4096, "bf16", 132, (64, 64)),  # 4 tiles: still the wgmma tile, the WMMA one is far slower
    (512, 64, 1024, "bf16", 8, (64, 64)),  # N = 64: no wider block (it would be mostly zeros)
    (512, 120, 1024, "bf16", 4, (128, 128)),  # N <= 128: no 256-column block
    (40, 8, 8, "fp16", 1, (64, 64)),  # the least shape
])
def test_where_the_wgmma_tile_applies(m, n, k, dtype, sms, want):
    assert sm90_matmul_block(m, n, k, dtype, sms) == want


@pytest.mark.parametrize("sms", [1, 2, 8, 32, 132])
def test_the_block_rule(sms):
    """The largest block (SM90_BLOCKS' order) whose tiles fill the SMs, of those the matrix fills more than half of
    on each side; else the smallest."""
    for m in (17, 33, 64, 65, 100, 128, 129, 200, 512, 1000, 4096):
        for n in (8, 64, 72, 128, 136, 256, 264, 1024, 4096, 16384):
            got = sm90_matmul_block(m, n, 64, "bf16", sms)
            fits = [(bm, bn) for bm, bn in SM90_BLOCKS if (bm == 64 or m > bm // 2) and (bn == 64 or n > bn // 2)]
            fills = [b for b in fits if -(-m // b[0]) * -(-n // b[1]) >= SM90_FILL * sms]
            assert got == (fills[0] if fills else (64, 64)), (m, n, sms, got)
            assert got[0] == 64 or m > 64


@pytest.mark.parametrize("bm,bn,k,stages", [
    (128, 256, 8192, 4), (128, 128, 8192, 6), (64, 256, 8192, 4), (128, 64, 8192, 8), (64, 128, 8192, 8),
    (64, 64, 8192, 12), (64, 64, 256, 6), (64, 64, 64, 3), (128, 256, 8, 3),
])
def test_stages_fit_the_budget(bm, bn, k, stages):
    assert sm90_stages(bm, bn, k) == stages
    smem = matmul_sm90_smem(bm, bn, k)
    assert smem <= 193 * 1024 and smem + 2304 + 16 * 1024 <= 227 * 1024  # the loop kernel's static arrays beside
    assert bm == 128 or stages * (bm + bn) * 128 >= 256 * bn  # BM = 64: the warpgroups' exchange fits the ring


def test_the_plan_cuts_what_the_kernel_computes(loader):
    model, plan, src = _generate(_two_matmuls("bf16"), sms=8)
    mm = [op for op in model.ops if op.kind == "matmul"]
    assert [sm90_matmul_block(model.tensors[o.inputs[0]].rows, model.tensors[o.inputs[1]].cols,
                              model.tensors[o.inputs[0]].cols, "bf16", 8) for o in mm] == [(128, 256), (128, 128)]
    for op, (bm, bn) in zip(mm, [(128, 256), (128, 128)]):
        out = model.tensors[op.output]
        regions = sorted((t["writes"][1], t["writes"][3]) for t in plan.tiles if t["op"] == op.id)
        assert regions == [(r, c) for r in range(0, out.rows, bm) for c in range(0, out.cols, bn)]
    assert f"{_tile(loader)}<__nv_bfloat16, 128, 256, 4, true>(" in src.text  # gelu fused: staged (256 columns)
    assert f"{_tile(loader)}<__nv_bfloat16, 128, 128, 6>(" in src.text
    # TMA: A's map boxes a block's rows by 64 of K, B's 64 of K by 64 columns, at the op's two indices
    want = [] if loader == "cp.async" else [
        spec for (op, (bm, _)) in zip(mm, [(128, 256), (128, 128)])
        for a, b in [(model.tensors[op.inputs[0]], model.tensors[op.inputs[1]])]
        for spec in (TensorMapSpec(MAPS_PER_OP * op.id, a.id, a.rows, a.cols, bm, 64),
                     TensorMapSpec(MAPS_PER_OP * op.id + 1, b.id, b.rows, b.cols, 64, 64))]
    assert list(src.tensor_maps) == want
    assert SM90_ARCH_MARK in src.text and "#define ARK_MIN_BLOCKS 1" in src.text
    assert src.smem_bytes == max(matmul_sm90_smem(128, 256, 136), matmul_sm90_smem(128, 128, 520))


def test_the_plan_cuts_every_block_shape_as_the_kernel_computes(loader):
    model, plan, src = _generate(_grid(1000), sms=2)
    seen = set()
    for op in model.ops:
        a, b, out = (model.tensors[i] for i in (*op.inputs, op.output))
        bm, bn = sm90_matmul_block(a.rows, b.cols, a.cols, "bf16", 2)
        seen.add((bm, bn))
        regions = sorted(tuple(t["writes"][1:]) for t in plan.tiles if t["op"] == op.id)
        assert regions == [(r, min(r + bm, out.rows), c, min(c + bn, out.cols)) for r in range(0, out.rows, bm)
                           for c in range(0, out.cols, bn)]
        assert f"{_tile(loader)}<__nv_bfloat16, {bm}, {bn}, {sm90_stages(bm, bn, 1000)}>(" in src.text
        assert loader == "cp.async" or TensorMapSpec(MAPS_PER_OP * op.id, a.id, a.rows, a.cols, bm, 64) in src.tensor_maps
    assert seen == set(SM90_BLOCKS)


@pytest.mark.parametrize("name,tma", [("matmul8192", True), ("block-s128", False), ("mlp-b64", False),
                                      ("block-s512", False)])
@pytest.mark.parametrize("env", [None, "auto", "1", "0"])
def test_tma_loads_where_a_matmul_has_more_tiles_than_sms(name, tma, env, monkeypatch):
    """auto (the default): TMA for matmuls of more tiles than SMs (CTAs run tile after tile), cp.async where every tile
    runs in one wave; $ARK_SM90_TMA=1 or 0 forces either, for every wgmma tile of the model."""
    if env is None:
        monkeypatch.delenv(SM90_TMA_ENV, raising=False)
    else:
        monkeypatch.setenv(SM90_TMA_ENV, env)
    want = {"1": True, "0": False}.get(env, tma)
    _, _, src = _generate(models.named(name), sms=132)
    assert ("matmul_tile_sm90_tma<" in src.text) == want and bool(src.tensor_maps) == want
    assert ("matmul_tile_sm90<" in src.text) == (not want)


def test_the_switch_turns_the_wgmma_tile_off(monkeypatch):
    monkeypatch.setenv(SM90_ENV, "0")
    assert sm90_matmul_block(8192, 8192, 8192, "bf16", 132) is None
    model, plan, src = _generate(models.named("matmul8192"), sms=132)
    assert "matmul_tile_sm90" not in src.text and SM90_ARCH_MARK not in src.text and not src.tensor_maps
    assert "#define ARK_MIN_BLOCKS 2" in src.text  # loop_kernel.cuh's __launch_bounds__(THREADS, ARK_MIN_BLOCKS)
    bm, bn = matmul_block(8192, 8192, 132)
    assert len(plan.tiles) == (8192 // bm) * (8192 // bn)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("case", ["two", "grid"])
def test_the_wgmma_tile_compiles_for_sm90a_and_falls_back_on_sm90(dtype, case, loader):
    from driver.gpu import compile

    _, _, src = _generate(_two_matmuls(dtype), sms=8) if case == "two" else _generate(_grid(1000, dtype), sms=2)
    extra = (f"-I{INCLUDE_DIR}",)
    assert compile.cubin(src.text, arch="sm_90a", extra=(*extra, "-DARK_REQUIRE_WGMMA"))[:4] == b"\x7fELF"
    assert compile.cubin(src.text, arch="sm_90", extra=extra)[:4] == b"\x7fELF"  # the WMMA halves
    with pytest.raises(compile.CompileError, match="ARK_REQUIRE_WGMMA"):
        compile.cubin(src.text, arch="sm_90", extra=(*extra, "-DARK_REQUIRE_WGMMA"))


@pytest.mark.parametrize("name", ["matmul8192", "block-s512", "block-s128", "mlp-b64"])
def test_named_models_compile_for_sm90a(name, loader):
    from driver.gpu import compile

    _, _, src = _generate(models.named(name), sms=132)
    assert compile.cubin(src.text, arch="sm_90a", extra=(f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"


@pytest.mark.parametrize("name", ["matmul8192", "grid"])
def test_the_wgmma_tile_keeps_its_accumulators_in_registers(name, loader):
    """ptxas on the sm_90a kernel: no spills (a spilled accumulator would also serialise the wgmma pipeline);
    `grid` has every block shape, 64-row ones with their exchange of sums included."""
    _, _, src = _generate(models.named(name), sms=132) if name != "grid" else _generate(_grid(1000), sms=2)
    log = _ptxas_log(src.text, name)
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log
    assert "Potential Performance Loss" not in log, log  # ptxas's note when it serialises wgmma


def test_only_marked_sources_are_built_for_sm90a_and_only_on_compute_capability_9_0():
    from driver.gpu import compile

    marked = f"{compile.ARCH_SPECIFIC_MARK}\nextern \"C\" __global__ void k() {{}}\n"
    assert compile.arch_specific(marked, "90") == "sm_90a"
    assert compile.arch_specific(marked, "80") is None and compile.arch_specific(marked, "100") is None
    assert compile.arch_specific("extern \"C\" __global__ void k() {}", "90") is None
    assert SM90_ARCH_MARK == compile.ARCH_SPECIFIC_MARK


def test_a_gpu_without_wgmma_gets_no_sm90_tile_and_no_sm90a_build():
    """DeviceSpec(wgmma=False), as the Runtime plans on a GPU that is not compute capability 9.0: the matmul is
    cut for the WMMA tile and the kernel carries no mark asking for sm_90a."""
    from ark_runtime import models as named
    from ark_runtime.kernel.codegen import generate
    from ark_runtime.plan import build_plan
    from ark_runtime.scheduler import DeviceSpec
    from driver.gpu.compile import ARCH_SPECIFIC_MARK

    m = named.matmul(1024)
    on, off = (build_plan(m, DeviceSpec(num_sms=132, wgmma=w)) for w in (True, False))
    assert ARCH_SPECIFIC_MARK in generate(m, on).text
    assert ARCH_SPECIFIC_MARK not in generate(m, off).text
    bm, bn = matmul_block(1024, 1024, 132)
    _, r0, r1, c0, c1 = off.tiles[0]["writes"]
    assert (r1 - r0, c1 - c0) == (bm, bn)


def test_fused_epilogues_are_staged_where_measured_and_compile_in_every_block(loader):
    """A bias and erf-GELU fused into every block: staged through the ring where the measured table says so (the
    256-column blocks), unrolled elsewhere, each compiled for sm_90a without spills."""
    from ark_runtime.lower import LowerOptions, lower
    from ark_runtime.ops.measured import decide

    m = Model("epilogues")
    x = m.input("x", (512, 136), "bf16")
    outs = [(m.unary("gelu_erf", m.add(m.matmul(x, m.input(f"w{i}", (136, 520), "bf16")),
                                      m.input(f"b{i}", (520,), "bf16"))), block)
            for i, block in enumerate(SM90_BLOCKS)]
    m.output(*(h for h, _ in outs))
    knobs = tuple((h.name, (("block", block), ("loader", loader))) for h, block in outs)
    lw = lower(m, DeviceSpec(num_sms=132), LowerOptions(split_k=False, knobs=knobs), cache=False)
    text = lw.source.text
    for op, v in zip(lw.model.ops, lw.plan.variants):
        bm, bn = v["block"]
        want = decide("matmul_sm90.epilogue", "256 columns" if bn == 256 else "64-128 columns")
        assert v["epilogue"] == want
        call = f"{_tile(loader)}<__nv_bfloat16, {bm}, {bn}, {v['stages']}"
        assert (call + ", true>" in text) == (want == "staged") and call in text
    log = _ptxas_log(text, "epilogues")
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log
