"""`arkdma bench models --quick` end to end on a GPU: every case measured by every method (the loop kernel, PyTorch
eager, HF's static cache, torch.compile), the runtime's greedy tokens and outputs checked against eager's, the JSON
and the plot written. Skips without a GPU, PyTorch or transformers. It compiles eight small models with
torch.compile, so it takes a few minutes: marked slow (left out of the default run; `-m gpu` takes it in, as
bench/gpu_check.sh's runtime-tests step does), and it asks pytest-timeout, where installed, for 600 s."""

from __future__ import annotations

import importlib.util
import json

import pytest

TIMEOUT = [pytest.mark.timeout(600)] if importlib.util.find_spec("pytest_timeout") else []
pytestmark = [pytest.mark.gpu, pytest.mark.slow, *TIMEOUT]


def test_a_quick_run_measures_and_checks_every_case(gpu, tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: this torch sees none")
    from arkdma_cli.main import main
    from bench.models import CASES

    out = tmp_path / "models.json"
    rc = main(["bench", "models", "--quick", "--json", str(out)])
    data = json.loads(out.read_text())
    rows = {r["case"]: r for r in data["rows"]}
    assert data["complete"] and list(rows) == [c.name for c in CASES]
    assert data["device"] == torch.cuda.get_device_name() and data["read_gbps"] > 100
    for case, r in rows.items():
        assert r["errors"] == {}, (case, r["errors"])
        assert r["ok"] is True, (case, r)
        for key in ("arkdma_ms", "eager_ms", "compiled_ms", "latency_ms", "pct_hbm", "ratio_to_compiled"):
            assert r[key] is not None and r[key] > 0, (case, key, r[key])
        assert 0 < r["arkdma_p10_ms"] <= r["arkdma_p90_ms"], (case, r)
        if r["kind"] == "decode":
            assert r["static_ms"] > 0 and r["arkdma_gpu_ms"] > 0
            assert r["tokens_compared"] == r["batch"] * r["new_tokens"]
            assert r["tokens_equal"] <= r["tokens_compared"] and r["near_ties"] == r["divergences"]
        else:
            assert r["static_ms"] is None and r["max_rel_err"] <= 6e-2
    assert rc == 0
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
