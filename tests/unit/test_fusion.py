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
