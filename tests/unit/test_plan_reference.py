"""A plan computes what its model computes: tiles run in an order the plan's counters allow, each seeing only
the regions it declares it reads, give the op-by-op float64 result (ark_runtime/reference.py). A tile that
read outside its regions, or ran before its producers, would leave NaN or a wrong value."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from ark_runtime import models as named_models  # noqa: E402
from ark_runtime import tiling  # noqa: E402
from ark_runtime.plan import build_plan  # noqa: E402
from ark_runtime.reference import evaluate, run_plan  # noqa: E402
from ark_runtime.scheduler import DeviceSpec  # noqa: E402
from tests.unit.model_strategies import models  # noqa: E402


def random_inputs(model, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for t in model.tensors:
        if t.producer is None:
            out[t.name] = rng.integers(0, 11, t.shape) if t.dtype == "int32" else rng.standard_normal(t.shape)
    return out


def assert_plan_computes(model, sms: int, seed: int = 0) -> None:
    plan = build_plan(model, DeviceSpec(num_sms=sms))
    inputs = random_inputs(model, seed)
    want = evaluate(model, inputs)
    got = run_plan(plan, model, inputs, seed=seed)
    for op in model.ops:
        t = model.tensors[op.output]
        assert not np.isnan(got[t.id]).any(), f"{op.kind} {op.fn}: a tile left NaN (read outside its regions?)"
        np.testing.assert_allclose(got[t.id], want[t.id], rtol=1e-9, atol=1e-9, err_msg=f"{op.kind} {op.fn}")


@pytest.mark.parametrize("sms", [1, 5, 16])
def test_small_named_models_compute_their_reference(sms):
    for model in (named_models.chain(8, 6, 40), named_models.mlp(3, 16, 48, "fp32"),
                  named_models.transformer_block(20, hidden=32, heads=4, dtype="fp32"),
                  named_models.matmul(40, "fp32"), named_models.copy_out(256)):
        assert_plan_computes(model, sms)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models(), st.integers(1, 12), st.integers(0, 3))
def test_random_models_compute_their_reference(model, sms, seed):
    assert_plan_computes(model, sms, seed)


def test_a_tile_reading_too_little_is_caught(monkeypatch):
    from ark_runtime.ops import matmul

    real = matmul.Matmul.tiles

    def short_reads(self, tm, op, v):
        real(self, tm, op, v)
        tm.tiles[:] = [t.__class__(t.id, t.op, t.index, t.writes,
                                   (t.reads[0], tiling.Region(t.reads[1].tensor, t.reads[1].r0, t.reads[1].r1 - 1,
                                                              t.reads[1].c0, t.reads[1].c1)), t.bytes, t.flops)
                       for t in tm.tiles]

    monkeypatch.setattr(matmul.Matmul, "tiles", short_reads)
    with pytest.raises(AssertionError, match="left NaN"):
        assert_plan_computes(named_models.mlp(2, 16, 32, "fp32"), 4)
