"""The loop kernel without a GPU: every op template compiles for sm_90 (NVRTC) in the kernels of the named models
and of random models; the program arrays hold every tile once with each wait serving the tile it precedes; host
values round to bf16/fp16 as the GPU does; the runtime refuses bad arguments before it looks for a GPU."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings

from ark_runtime import models
from ark_runtime.fusion import fuse
from ark_runtime.host_values import from_bits, to_bits
from ark_runtime.kernel.codegen import INCLUDE_DIR, generate
from ark_runtime.ops.matmul import GemvConfig, GemvMmaConfig
from ark_runtime.kernel.program import INS_RUN, INS_SIGNAL, INS_WAIT, INS_WORDS, build_program
from ark_runtime.kernel.records import CONTROL_DTYPE, PROGRAM_DTYPE, expected_offsets, layout_checks
from ark_runtime.model import Model, ModelError
from ark_runtime.plan import build_plan
from ark_runtime.scheduler import DeviceSpec
from tests.unit.model_strategies import models as random_models

cupy = pytest.importorskip("cupy", reason="the gpu extra (CuPy, NVRTC) is not installed")


def _compile(model: Model, sms: int = 132) -> bytes:
    from driver.gpu import compile

    model = fuse(model)  # as the runtime runs it
    plan = build_plan(model, DeviceSpec(num_sms=sms))
    src = generate(model, plan)
    return compile.cubin(src.text, extra=(f"-I{INCLUDE_DIR}",), name=f"{model.name}.cu")


@pytest.mark.parametrize("name", list(models.NAMED))
def test_every_named_model_compiles_for_sm90(name):
    assert _compile(models.named(name))[:4] == b"\x7fELF"


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_every_op_template_compiles_in_every_dtype(dtype):
    m = Model(f"all-{dtype}")
    x = m.input("x", (2, 33, 64), dtype)
    row, w, b = m.input("row", (64,), dtype), m.input("w", (64, 40), dtype), m.input("b", (64,), dtype)
    ys = [m.unary(fn, x) for fn in ("gelu", "silu", "relu", "exp", "neg", "sqrt", "rsqrt", "identity")]
    ys += [m.binary(fn, x, row) for fn in ("add", "sub", "mul", "div", "max")]
    ys += [m.reduce(fn, x) for fn in ("sum", "max", "mean")]
    ys += [m.softmax(x), m.layernorm(x, row, b), m.rmsnorm(x, row), m.matmul(x, w),
           m.attention(x, x, x, heads=2), m.attention(x, x, x, heads=4, causal=False),
           m.rope(x, m.input("cos", (33, 32), dtype), m.input("sin", (33, 32), dtype)),
           m.embedding(m.input("table", (9, 64), dtype), m.input("ids", (5,), "int32")), m.copy(x, "host")]
    w2 = m.input("w2", (45, 77), dtype)  # K and N not multiples of 8: element-wise loads
    ys += [m.matmul(m.input(f"odd{rows}", (rows, 45), dtype), w2) for rows in (7, 21)]  # skinny, and tiles
    ys += [m.matmul(m.input("v", (3, 64), dtype), w)]  # skinny with 16-byte copies
    m.output(*ys)
    assert _compile(m, sms=16)[:4] == b"\x7fELF"


def _skinny(rows: int, k: int, n: int, dtype: str = "bf16") -> Model:
    m = Model(f"skinny{rows}")
    m.output(m.matmul(m.input("x", (rows, k), dtype), m.input("w", (k, n), dtype)))
    return m


@pytest.mark.parametrize("rows, tile, wgmma", [(1, "gemv", False), (4, "gemv", False), (5, "gemv_mma", False),
                                              (8, "gemv_mma", False), (16, "gemv_mma", False), (17, "matmul", False),
                                              (64, "matmul", False), (1, "gemv", True), (4, "gemv", True),
                                              (5, "gemv_mma", True), (16, "gemv_mma", True), (17, "sm90", True)])
def test_matmuls_of_few_rows_stream_their_weights(rows, tile, wgmma):
    """Up to 16 rows a weight-streaming tile: on the FMA units up to 4 (tiling.SKINNY_ROWS_FMA), then on tensor cores
    with the operands swapped (gemv_mma.cuh), with or without Hopper's wgmma tile for the larger matmuls."""
    m = _skinny(rows, 4096, 4096)
    src = generate(m, build_plan(m, DeviceSpec(num_sms=132, wgmma=wgmma)))
    kinds = {"gemv": "ark::gemv_tile<", "gemv_mma": "ark::gemv_mma_tile<", "matmul": "ark::matmul_tile<",
             "sm90": "ark::matmul_tile_sm90<"}
    want = ["matmul", "sm90"] if tile == "sm90" else [tile]  # the wgmma tile beside its fallback for other archs
    assert [k for k, call in kinds.items() if call in src.text] == want
    if tile == "gemv":  # 32 columns a tile (128 tiles for 132 SMs), the slices in flight counted in the launch's smem
        g = GemvConfig.of("bf16", rows, 32)
        assert f"ark::gemv_tile<__nv_bfloat16, {rows}, 32, {g.cpt}, {g.rpt}, {g.stages}, true>" in src.text
        assert src.smem_bytes >= g.smem("bf16") >= (g.stages - 1) * 16 * 1024
    if tile == "gemv_mma":
        g = GemvMmaConfig.of(rows, 32)
        assert f"ark::gemv_mma_tile<__nv_bfloat16, {rows}, 32, {g.stages}>" in src.text
        assert src.smem_bytes >= g.smem() >= (g.stages - 1) * 16 * 1024


@pytest.mark.parametrize("name, fma, mma, wgmma", [("mlp-b1", 2, 0, True), ("mlp-b8", 0, 2, True),
                                                   ("mlp-b8", 0, 2, False), ("mlp-b64", 0, 0, True),
                                                   ("block-s128", 0, 0, True)])
def test_named_models_stream_the_weights_of_their_skinny_matmuls(name, fma, mma, wgmma):
    m = fuse(models.named(name))
    text = generate(m, build_plan(m, DeviceSpec(num_sms=132, wgmma=wgmma))).text
    run = text[text.index("run_tile("):]  # the tiles' bodies (preload_tile repeats the weight-streaming ones)
    assert (run.count("ark::gemv_tile<"), run.count("ark::gemv_mma_tile<")) == (fma, mma)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_skinny_matmuls_compile_in_every_dtype(dtype):
    """Rows on both sides of 8 (8 or 4 columns a thread in bf16/fp16), up to 16; 16-byte copies (K and N multiples
    of 8) and element-wise ones; several slices and partial tiles. bf16/fp16 with 16-byte copies and more than 4
    rows: the tensor-core tile, in each of its widths (32, 64, 128 columns) and with 8 and 16 padded rows."""
    m = Model(f"skinny-{dtype}")
    shapes = ((1, 64, 96), (3, 37, 33), (8, 1000, 4100), (9, 64, 96), (13, 37, 33), (16, 1000, 4104),
              (5, 1000, 2048), (12, 64, 1024))
    m.output(*(m.matmul(m.input(f"x{i}", (rows, k), dtype), m.input(f"w{i}", (k, n), dtype))
               for i, (rows, k, n) in enumerate(shapes)))
    assert _compile(m, sms=16)[:4] == b"\x7fELF"
    text = generate(fuse(m), build_plan(fuse(m), DeviceSpec(num_sms=16))).text
    mma = {(int(r), int(w)) for r, w in re.findall(r"gemv_mma_tile<\w+, (\d+), (\d+), \d+>", text)}
    assert mma == (set() if dtype == "fp32" else {(9, 32), (16, 32), (5, 128), (12, 64)})


# (seq, head dim, heads, causal, SMs planned for): each kind of attention tile once, the query block noted
ATTENTION_CASES = [(300, 64, 2, True, 8),  # 64 queries a tile: 4 groups x 2 key splits
                   (100, 128, 2, False, 8),  # 32: 2 groups x 4 key splits
                   (17, 80, 8, True, 8),  # 32 for 17 queries: the second group has none
                   (128, 32, 2, False, 132),  # 16: one group x 8 key splits
                   (128, 128, 2, True, 132),  # 16 with one stage of keys in flight
                   (37, 20, 2, True, 132),  # element-wise loads (a head's rows not 16-byte aligned)
                   (70, 160, 2, True, 8),  # two passes over the keys (128 + 32 output columns)
                   (100, 256, 2, False, 8)]  # two passes, one stage


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_attention_compiles_for_every_tile_kind(dtype):
    """The tensor-core tile (bf16, fp16; the scalar tile for fp32) at every query block, key split and stage count,
    the element-wise loads and the two-pass head dimensions; a kernel per SM count planned for."""
    from ark_runtime.ops.attention import attention_block

    for sms in (8, 132):
        m = Model(f"attention-{dtype}-{sms}")
        ys = []
        for s, d, heads, causal, _ in (c for c in ATTENTION_CASES if c[4] == sms):
            q = m.input(f"q{len(ys)}", (s, heads * d), dtype)
            ys.append(m.attention(q, q, q, heads=heads, causal=causal))
        m.output(*ys)
        assert _compile(m, sms=sms)[:4] == b"\x7fELF"
    assert [attention_block(s, d, h, sms) for s, d, h, _, sms in ATTENTION_CASES] == [64, 32, 32, 16, 16, 16, 32, 32]
    assert attention_block(128, 64, 16, 132) == 16 and attention_block(512, 64, 16, 132) == 32


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_row_ops_compile_for_every_team_and_width(dtype):
    """Reductions, softmax and the norms at row lengths that are odd (element-wise loads), fit the registers in one
    16-byte piece a thread or several, or need slabs (20000), with one row a tile (a team of up to the whole CTA)
    and many (a warp per row)."""
    m = Model(f"rows-{dtype}")
    ys = []
    for rows, cols in ((130, 7), (3, 1000), (1, 4096), (1, 20000), (4096, 1024)):
        x = m.input(f"x{len(ys)}", (rows, cols), dtype)
        w, b = m.input(f"w{len(ys)}", (cols,), dtype), m.input(f"b{len(ys)}", (cols,), dtype)
        ys += [m.layernorm(x, w, b), m.rmsnorm(x, w), m.softmax(x), m.reduce("sum", x), m.reduce("max", x)]
    m.output(*ys)
    assert _compile(m)[:4] == b"\x7fELF"


def test_row_teams_fit_the_rows():
    from ark_runtime.ops.blocks import row_block_rows, row_team

    assert row_team("bf16", 128, 1024, 132) == 128  # layernorm of block-s128: one row a tile, 16 bytes a thread
    assert row_team("bf16", 4096, 1024, 132) == 32  # 32 rows a tile: a warp per row
    assert row_team("fp32", 1, 4096, 132) == 256 and row_team("bf16", 1, 5000, 132) == 256
    assert row_team("fp16", 130, 7, 132) == 32 and row_block_rows(130, 7, 132) == 146  # short rows share a tile
    assert row_block_rows(128, 1024, 132) == 1


@settings(max_examples=8, deadline=None)
@given(model=random_models())
def test_random_models_compile(model):
    assert _compile(model, sms=8)[:4] == b"\x7fELF"


def test_a_compile_error_names_the_generated_line(monkeypatch):
    from driver.gpu.compile import CompileError

    m = models.named("copy8k")
    src = generate(m, build_plan(m, DeviceSpec(num_sms=4)))
    broken = src.text.replace("ark::unary_tile<", "ark::no_such_template<")
    from driver.gpu import compile

    with pytest.raises(CompileError, match="no_such_template"):
        compile.cubin(broken, extra=(f"-I{INCLUDE_DIR}",))


def test_a_head_dimension_above_the_template_is_refused_when_the_op_is_made():
    m = Model("wide")
    q = m.input("q", (4, 512), "bf16")
    with pytest.raises(ModelError, match="head dimension 512"):
        m.attention(q, q, q, heads=1)
    assert m.attention(q, q, q, heads=2).shape == (4, 512)  # 256, the largest the template takes


@pytest.mark.parametrize("name", ["chain64", "block-s128", "copy8k", "tasks1000"])
def test_program_runs_every_tile_once_and_each_wait_serves_the_next_tile(name):
    model = models.named(name)
    plan = build_plan(model, DeviceSpec(num_sms=132))
    source = generate(model, plan)
    prog = build_program(plan, source.op_cases)
    assert prog.ins.shape[1] == INS_WORDS and prog.num_counters == len(plan.counters)
    runs = prog.ins[prog.ins[:, 0] == INS_RUN]
    assert sorted(runs[:, 1].tolist()) == list(range(len(plan.tiles)))
    for kind, tile, op, r0, r1, c0, c1, case in runs:  # each run carries its tile's op, region and op's case
        assert [op, r0, r1, c0, c1] == [plan.tiles[tile]["op"], *plan.tiles[tile]["writes"][1:]]
        assert case == source.op_cases[op] and f"    case {case}:" in source.text
    with pytest.raises(ValueError, match="op_cases"):
        build_program(plan, source.op_cases[:-1])
    for sm in range(plan.num_sms):
        ins = prog.ins[prog.stream_start[sm]:prog.stream_start[sm + 1]]
        for i, (kind, arg, delta, tile, first, count, _, _) in enumerate(ins):
            if kind == INS_WAIT:
                nxt = next(row[1] for row in ins[i:] if row[0] == INS_RUN)
                assert tile == nxt and delta in (0, 1) and 0 <= arg < prog.num_counters
                counter = plan.counters[arg]
                if counter["kind"] == "op":
                    assert prog.members[first:first + count].tolist() == counter["members"]
                else:
                    assert count == 0
            elif kind == INS_SIGNAL:
                assert ins[i - 1][0] == INS_RUN and tile == ins[i - 1][1]


def test_the_shared_records_are_checked_in_every_kernel():
    checks = "\n".join(layout_checks())
    assert f"sizeof(ark::Control) == {CONTROL_DTYPE.itemsize}" in checks
    assert f"sizeof(ark::Program) == {PROGRAM_DTYPE.itemsize}" in checks
    assert checks.count("out[") == len(expected_offsets()) == len(CONTROL_DTYPE.names) + len(PROGRAM_DTYPE.names)


def test_bf16_and_fp16_round_to_nearest_even():
    m = Model("v")
    t = m.input("t", (6,), "bf16")
    h = m.input("h", (6,), "fp16")
    x = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -2.5, 1e30, np.nan])
    bits = to_bits(t, x)
    assert bits[:5].tolist() == [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x714A]
    assert np.isnan(from_bits(t, bits)[5])
    np.testing.assert_array_equal(from_bits(h, to_bits(h, x))[:4], np.float16(x[:4]))


def test_host_values_refuse_what_does_not_fit():
    m = Model("v")
    t, ids = m.input("t", (2, 3), "fp32"), m.input("ids", (3,), "int32")
    with pytest.raises(ModelError, match=r"is \(2, 3\); the value given is \(3, 2\)"):
        to_bits(t, np.zeros((3, 2)))
    with pytest.raises(ModelError, match="int32 ids"):
        to_bits(ids, np.zeros(3))
    with pytest.raises(ModelError, match="does not fit"):
        to_bits(ids, np.array([0, 1, 1 << 40]))
    with pytest.raises(ModelError, match="fp32"):
        to_bits(t, np.array([["a", "b", "c"]] * 2))


def test_runtime_refuses_bad_arguments_before_looking_for_a_gpu():
    from ark_runtime.runtime import LoopError, Runtime

    m = models.named("copy8k")
    with pytest.raises(LoopError, match="takes a Model"):
        Runtime("copy8k")
    with pytest.raises(LoopError, match="copy_path"):
        Runtime(m, copy_path="pigeon")
    for bad in (0, -1, True, "1", 1e9):
        with pytest.raises(LoopError, match="budget_s"):
            Runtime(m, budget_s=bad)
    with pytest.raises(LoopError, match="no tensor called"):
        Runtime(m, bind={"nope": np.zeros(3)})
    for bad in ("yes", 1.5, []):
        with pytest.raises(LoopError, match="split_k"):
            Runtime(m, split_k=bad)
    for bad in ("yes", 1, None):
        with pytest.raises(LoopError, match="fuse_chains"):
            Runtime(m, fuse_chains=bad)
    for bad in ("software", "card-sim", "", 3):  # checked whether or not the model has a copy
        for model in (m, models.named("chain64")):
            with pytest.raises(LoopError, match="cannot take copies from GPU code"):
                Runtime(model, engine=bad)
    with pytest.raises(LoopError, match="placement 'random'"):
        Runtime(m, placement="random")
    for bad in (0, -3, 1.5, True, "8"):  # 0 is not 'all of them'
        with pytest.raises(LoopError, match="sms="):
            Runtime(m, sms=bad)


def test_only_weights_no_op_writes_load_before_the_waits():
    """preload_tile holds the weight-streaming bodies (gemv_mma.cuh's, gemv.cuh's of a few rows) whose B is an input;
    a matmul whose B an op computes runs as one piece (ark::TILE_RUN); a model with neither has an empty one."""
    m = Model("preload")
    h = m.unary("gelu", m.input("x", (8, 4096), "bf16"))
    y = m.matmul(h, m.input("w", (4096, 4096), "bf16"))
    z = m.matmul(h, m.unary("neg", m.input("v", (4096, 1024), "bf16")))
    one = m.matmul(m.input("x1", (1, 4096), "bf16"), m.input("w1", (4096, 4096), "bf16"))
    m.output(y, z, one)
    text = generate(m, build_plan(m, DeviceSpec(num_sms=132))).text
    early, run = text[text.index("preload_tile("):text.index("run_tile(")], text[text.index("run_tile("):]
    assert early.count("ark::gemv_mma_tile<") == 1 and "4096, 4096, 4096, r0 % 8, c0, c1, smem, mode)" in early
    assert "1024, 4096, 4096, r0 % 8, c0, c1, smem, ark::TILE_RUN)" in run
    assert early.count("ark::gemv_tile<") == 1 and "4096, 4096, 4096, r0 % 1, c0, c1, smem, mode)" in early
    plain = Model("plain")
    plain.output(plain.unary("gelu", plain.input("x", (8, 4096), "bf16")))
    text = generate(plain, build_plan(plain, DeviceSpec(num_sms=132))).text
    assert "switch" not in text[text.index("preload_tile("):text.index("run_tile(")]
