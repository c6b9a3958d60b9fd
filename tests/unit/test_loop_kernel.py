"""The loop kernel without a GPU: every op template compiles for sm_90 (NVRTC) in the kernels of the named models
and of random models; the program arrays hold every tile once with each wait serving the tile it precedes; host
values round to bf16/fp16 as the GPU does; the runtime refuses bad arguments before it looks for a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from ark_runtime import models
from ark_runtime.fusion import fuse
from ark_runtime.host_values import from_bits, to_bits
from ark_runtime.kernel.codegen import INCLUDE_DIR, generate
from ark_runtime.kernel.program import INS_RUN, INS_SIGNAL, INS_WAIT, build_program
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
           m.embedding(m.input("table", (9, 64), dtype), m.input("ids", (5,), "int32")), m.copy(x, "host"),
           m.matmul(m.input("odd", (7, 45), dtype), m.input("w2", (45, 77), dtype))]
    m.output(*ys)
    assert _compile(m, sms=16)[:4] == b"\x7fELF"


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


def test_a_head_dimension_above_the_template_is_refused():
    m = Model("wide")
    q = m.input("q", (4, 512), "bf16")
    m.output(m.attention(q, q, q, heads=1))
    with pytest.raises(ModelError, match="head dimension 512"):
        generate(m, build_plan(m, DeviceSpec(num_sms=4)))


@pytest.mark.parametrize("name", ["chain64", "block-s128", "copy8k"])
def test_program_runs_every_tile_once_and_each_wait_serves_the_next_tile(name):
    plan = build_plan(models.named(name), DeviceSpec(num_sms=132))
    prog = build_program(plan)
    runs = prog.ins[prog.ins[:, 0] == INS_RUN, 1]
    assert sorted(runs.tolist()) == list(range(len(plan.tiles)))
    for sm in range(plan.num_sms):
        ins = prog.ins[prog.stream_start[sm]:prog.stream_start[sm + 1]]
        for i, (kind, arg, delta, tile) in enumerate(ins):
            if kind == INS_WAIT:
                nxt = next(t for k, t, _, _ in ins[i:] if k == INS_RUN)
                assert tile == nxt and delta in (0, 1) and 0 <= arg < prog.num_counters
            elif kind == INS_SIGNAL:
                assert ins[i - 1][0] == INS_RUN and tile == ins[i - 1][1]
    for c, (first, count) in enumerate(prog.groups):
        if plan.counters[c]["kind"] == "op":
            assert prog.members[first:first + count].tolist() == plan.counters[c]["members"]
        else:
            assert count == 0
    assert (prog.tiles[:, 0] == [t["op"] for t in plan.tiles]).all()


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
