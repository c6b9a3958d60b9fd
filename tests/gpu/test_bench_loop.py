"""`arkdma bench loop` on a GPU: PyTorch's programs compute what the models define (so the comparison is
like for like), and a quick run of the cheap cases measures and checks every row. Skips without a GPU or
PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch():
    from driver.gpu.launch import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"needs a CUDA GPU: {reason}")
    return pytest.importorskip("torch")


def test_pytorch_programs_compute_what_the_models_define(torch):
    from ark_runtime.reference import evaluate
    from bench.loop import TOL, LoopConfig, _inputs, cases

    for case in cases(torch, LoopConfig(cases=("a", "b", "c", "d", "e"), quick=True)):
        m = case.model
        if m.name == "matmul2048":
            continue  # one torch.matmul; its float64 reference is slow and says nothing new
        inputs = _inputs(torch, m)
        got = case.fn(**inputs).float().cpu().numpy()
        want = evaluate(m, {k: v.float().cpu().numpy().astype(np.float64) for k, v in inputs.items()})[m.outputs[0]]
        scale = max(1.0, float(np.abs(want).max()))
        err = float(np.abs(got.reshape(want.shape) - want).max()) / scale
        assert err <= TOL[m.tensors[m.outputs[0]].dtype], f"{m.name}: PyTorch's program is off by {err:.3g}"


def test_a_quick_run_measures_and_checks_every_row(torch):
    from bench.loop import LoopConfig, run

    from ark_runtime.runtime import graph_copies_unavailable

    paths = {"sm", "engine:software-cuda"} | (set() if graph_copies_unavailable() else {"graph"})
    result = run(LoopConfig(cases=("d", "f"), compile=False, quick=True, reps=5, samples=2, roundtrips=30,
                            roundtrip_warmup=3))
    assert [r.case for r in result.rows] == ["d"] + ["f"] * 2 * len(paths)
    for r in result.rows:
        assert r.ok, f"{r.case} {r.model}: off by {r.max_rel_err}"
        assert r.arkdma_us > 0 and r.eager_us > 0 and r.graph_us > 0 and r.ratio_to_best_torch > 0
        for key in ("roundtrip", "graph_roundtrip"):
            lo, mid, hi = (getattr(r, f"{key}{q}_us") for q in ("_p10", "", "_p90"))
            assert 0 < lo <= mid <= hi, (r.model, key, lo, mid, hi)
        assert r.roundtrip_ratio == pytest.approx(r.roundtrip_us / r.graph_roundtrip_us)
        assert r.go_path in ("auto", "stream", "host")
        assert sum(r.go_writes.values()) == 1 + 3 + 30 + 1  # the first run, the round trips (3 + 30), the timed run
    assert {r.path for r in result.rows if r.case == "f"} == paths
    assert result.rows[0].per_edge_us == pytest.approx(result.rows[0].arkdma_us / 100)
