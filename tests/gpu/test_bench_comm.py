"""`arkdma bench comm --quick` end to end on GPUs: every row measured (none failed), its JSON and plot written, the
baselines beside arkdma on two GPUs, `"loopback": true` and no baselines on one. Skips without a GPU or PyTorch."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.gpu


def test_a_quick_run_measures_every_row(gpu, tmp_path):
    pytest.importorskip("torch")
    import cupy

    from arkdma_cli.main import main

    two = cupy.cuda.runtime.getDeviceCount() >= 2 and cupy.cuda.runtime.deviceCanAccessPeer(0, 1)
    out = tmp_path / "comm.json"
    rc = main(["bench", "comm", "--quick", "--json", str(out), "--plot", str(tmp_path / "comm.png")])
    data = json.loads(out.read_text())
    failed = [(r["op"], r["bytes"], r["error"]) for r in data["rows"] if r["error"]]
    assert rc == 0 and not failed, failed
    assert data["complete"] and data["loopback"] is (not two)
    ops = {r["op"] for r in data["rows"]}
    assert ops == {"put", "all_reduce", "put_rate", "overlap", "tp_block"}
    for r in data["rows"]:
        assert r["arkdma_us"] > 0 and r["arkdma_p10_us"] <= r["arkdma_us"] <= r["arkdma_p90_us"]
        if two:
            assert r["nccl_us"] and r["nccl_us"] > 0, r
        else:
            assert r["nccl_us"] is None and "two GPUs" in r["nccl_error"]
    overlap = next(r for r in data["rows"] if r["op"] == "overlap")
    assert overlap["pct_of_ideal"] is not None
    assert (tmp_path / "comm.png").stat().st_size > 5000
