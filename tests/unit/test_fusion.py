"""Elementwise chains fused into one op: the fused model computes what the model as written does, keeps every
output and every tensor read twice, and its plan holds the invariants; chain64 becomes one op."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

from ark_runtime import models
from ark_runtime.fusion import chains, fuse
from ark_runtime.model import Model
from ark_runtime.plan import build_plan
from ark_runtime.reference import evaluate, run_plan
from ark_runtime.scheduler import DeviceSpec
from tests.unit.model_strategies import models as random_models


def _inputs(model: Model, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for t in model.tensors:
        if t.producer is None:
            out[t.name] = rng.integers(0, 11, t.shape) if t.dtype == "int32" else rng.uniform(0.5, 1.5, t.shape)
    return out


def _same_outputs(a: Model, b: Model, inputs) -> None:
    va, vb = evaluate(a, inputs), evaluate(b, inputs)
    names_b = {t.name: t.id for t in b.tensors}
    assert [a.tensors[i].name for i in a.outputs] == [b.tensors[i].name for i in b.outputs]
    for tid in a.outputs:
        np.testing.assert_allclose(vb[names_b[a.tensors[tid].name]], va[tid], rtol=1e-12, atol=1e-12)


def test_chain64_is_one_op_of_64_steps_with_its_names():
    m = models.chain(64, rows=4, cols=8)
    f = fuse(m)
    assert len(f.ops) == 1 and f.ops[0].kind == "fused" and len(f.ops[0].attr("steps")) == 64
    assert [t.name for t in f.tensors] == ["x", m.tensors[m.outputs[0]].name]
    _same_outputs(m, f, _inputs(m))


def test_a_tensor_read_twice_or_returned_is_stored():
    m = Model("keep")
    x = m.input("x", (4, 8), "fp32")
    a = m.unary("exp", x)
    b = m.unary("neg", a)  # a is read again below: stays in memory
    c = m.add(b, a)
    d = m.unary("gelu", c)
    e = m.unary("silu", d)  # d is an output: stays in memory
    m.output(d, m.unary("relu", e))
    f = fuse(m)
    kept = {t.name for t in f.tensors}
    assert {a.name, d.name} <= kept and b.name not in kept and e.name not in kept
    assert [len(g) for g in chains(m)] == [1, 3, 2]
    _same_outputs(m, f, _inputs(m))


def test_broadcast_inputs_join_the_chain_but_a_shape_change_ends_it():
    m = Model("bcast")
    x, row = m.input("x", (5, 8), "fp32"), m.input("row", (8,), "fp32")
    y = m.mul(m.unary("exp", x), row)  # row broadcasts: joins
    z = m.add(m.reduce("sum", y), m.input("c", (5, 1), "fp32"))  # a reduction ends the chain
    m.output(m.binary("max", m.unary("neg", x), z))  # (5, 8) from a (5, 1) chain: neg(x) chain grows instead
    f = fuse(m)
    assert [o.kind for o in f.ops] == ["fused", "reduce", "binary", "fused"]
    _same_outputs(m, f, _inputs(m))


def test_nothing_to_fuse_gives_the_model_back():
    m = models.matmul(64)
    assert fuse(m) is m


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=random_models())
def test_random_models_fused_compute_the_same_and_plan_soundly(model):
    f = fuse(model)
    inputs = _inputs(model)
    _same_outputs(model, f, inputs)
    plan = build_plan(f, DeviceSpec(num_sms=5))
    tiled = run_plan(plan, f, inputs)
    for tid in f.outputs:
        np.testing.assert_allclose(tiled[tid], evaluate(f, inputs)[tid], rtol=1e-9, atol=1e-9)


def test_a_chain_after_a_matmul_is_its_epilogue():
    """GELU after a projection and a residual add after one (with a bias row broadcast) go into the matmul's
    stores: no op, no pass over memory, no wait of their own; the names of what survives are kept."""
    m = Model("epi")
    x = m.input("x", (37, 64), "bf16")
    w, bias = m.input("w", (64, 64), "bf16"), m.input("bias", (64,), "bf16")
    h = m.unary("gelu", m.add(m.matmul(x, w), bias))  # bias broadcast over rows
    y = m.add(m.matmul(h, w), x)  # the residual: the matmul's own A is read again
    m.output(y)
    f = fuse(m)
    assert [o.kind for o in f.ops] == ["matmul", "matmul"]
    first, second = f.ops
    assert first.attr("epilogue") == (("add", ("in", 0), ("in", 1)), ("gelu", ("step", 0)))
    assert [f.tensors[i].name for i in first.inputs] == ["x", "w", "bias"]
    assert second.attr("epilogue") == (("add", ("in", 0), ("in", 1)),)
    assert [f.tensors[i].name for i in second.inputs] == [h.name, "w", "x"]
    assert f.tensors[f.outputs[0]].name == y.name
    inputs = _inputs(m)
    _same_outputs(m, f, inputs)
    got = run_plan(build_plan(f, DeviceSpec(num_sms=8)), f, inputs)[f.outputs[0]]
    np.testing.assert_allclose(got, evaluate(m, inputs)[m.outputs[0]], rtol=1e-12)


def test_a_matmul_result_read_twice_or_returned_is_stored():
    m = Model("keep-mm")
    x, w = m.input("x", (16, 32), "fp32"), m.input("w", (32, 32), "fp32")
    y = m.matmul(x, w)
    m.output(m.add(m.unary("relu", y), y))  # y read twice: stored, the relu starts a chain of its own
    z = m.matmul(x, w)
    m.output(z, m.unary("neg", z))  # z is an output
    f = fuse(m)
    assert not any(o.attr("epilogue") for o in f.ops)
    _same_outputs(m, f, _inputs(m))


def test_a_split_matmul_moves_its_epilogue_to_the_sum():
    from ark_runtime.split_k import split_k

    m = Model("epi-split")
    x, w = m.input("x", (128, 4096), "bf16"), m.input("w", (4096, 256), "bf16")
    r = m.input("r", (128, 256), "bf16")
    m.output(m.add(m.matmul(x, w), r))
    device = DeviceSpec(num_sms=132, wgmma=True)
    s = split_k(fuse(m), device)
    parts, total = s.ops
    assert parts.kind == "matmul" and parts.attr("k_splits") and not parts.attr("epilogue") and len(parts.inputs) == 2
    assert total.kind == "split_sum" and total.attr("epilogue") and [s.tensors[i].name for i in total.inputs[1:]] == ["r"]
    inputs = _inputs(m)
    got = run_plan(build_plan(s, device), s, inputs)[s.outputs[0]]
    np.testing.assert_allclose(got, evaluate(m, inputs)[m.outputs[0]], rtol=1e-10)
