"""`arkdma sim bench` end to end on a tiny configuration: the JSON's shape, every byte checked, the plot written."""

from __future__ import annotations

import json

import pytest

from sim import toolchain

pytestmark = [pytest.mark.sim,
              pytest.mark.skipif(toolchain.missing() is not None, reason=f"no simulator: {toolchain.missing()}")]

ROW_KEYS = {"bytes", "descriptors", "gbps", "line_rate_fraction", "latency_ns", "latency_cycles",
            "doorbell_to_first_read_cycles", "gbps_second_half", "gbps_with_ramp", "verified"}


def test_tiny_bench_writes_checked_rows(tmp_path):
    from arkdma_cli.main import main

    out = tmp_path / "bench.json"
    # slots=16 at 512 bits is the conformance suite's build, so no extra Verilator build in CI.
    assert main(["sim", "bench", "--json", str(out), "--sizes", "64,8192", "--total-bytes", "4096",
                 "--round-trip-ns", "200", "--slots", "16"]) == 0
    result = json.loads(out.read_text())
    assert out.with_suffix(".png").stat().st_size > 0
    assert (result["clock_mhz"], result["data_width"], result["round_trip_ns"]) == (250.0, 512, 200.0)
    assert result["line_rate_gbps"] == pytest.approx(16.0)
    assert [r["bytes"] for r in result["rows"]] == [64, 8192]
    assert [r["descriptors"] for r in result["rows"]] == [64, 4]
    for row in result["rows"]:
        assert ROW_KEYS <= row.keys()
        assert row["verified"] is True
        # a completion write may wait behind a data burst, so over three 128-beat descriptors the
        # steady rate can read a few percent above the line
        assert 0 < row["line_rate_fraction"] <= 1.05
        assert row["gbps"] == pytest.approx(row["line_rate_fraction"] * 16.0)
        assert row["latency_ns"] == pytest.approx(row["latency_cycles"] * 4.0)
        # one descriptor alone waits at least for its read and its write response (50 cycles each)
        assert row["latency_cycles"] > 100
    assert result["verified"] is True
    assert result["accept"]["verified"] is True and result["accept"]["read_requests"] == 16
    figures = result["figures"]
    assert 0 < figures["doorbell_to_first_read_cycles"] < 100
    assert 0 < figures["accepted_per_cycle"] <= 1.0
    model = result["end_to_end_model"]
    assert model["label"] == "model" and model["bytes"] == 8192
    assert model["total_ns"] == pytest.approx(sum(t["ns"] for t in model["terms"]))
    assert set(result["targets"]) == {"line_rate_fraction_from_1KiB", "doorbell_to_first_read_cycles",
                                      "per_descriptor_overhead_cycles", "accepted_per_cycle"}
