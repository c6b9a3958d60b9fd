"""Waveforms end to end: a short job on a traced build writes a VCD, and sim/waves.py's per-descriptor
intervals read from it are ordered, positive and consistent with the memory latency the run was given."""

from __future__ import annotations

import json

import pytest

from driver.abi import Flag, Perm
from rtl.params import EngineParams
from tests.conformance.builder import Builder, desc, imm
from tests.conformance.compare import assert_same
from tests.conformance.test_conformance import reference

pytestmark = pytest.mark.sim
# A small engine: a traced build compiles for minutes at 512 bits.
PARAMS = EngineParams(data_width=128, num_queues=2, slots=16, num_regions=16, reads_outstanding=8,
                      writes_outstanding=16, buffer_bytes=4096, max_burst_beats=32)
LATENCY_NS = 400.0
CLOCK_MHZ = 250.0
LATENCY = round(LATENCY_NS * CLOCK_MHZ / 1000)  # cycles


def probe():
    b = Builder("waves_probe", num_queues=2)
    b.buffer("src", 16 * 1024)
    b.buffer("dst", 32 * 1024, "byte", 0xA5)
    b.buffer("sig", 64, "byte", 0)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.region(2, "sig", perms=Perm.WRITE)
    b.queue(0)
    b.queue(1)
    b.post(0, [desc(0, 100, 1, 0, 4096, Flag.NOTIFY, cookie=1), desc(0, 7, 1, 5000, 256, cookie=2),
               desc(0, 0, 1, 6000, 1000, Flag.NOTIFY, cookie=3)])
    b.post(1, [desc(0, 4000, 1, 16000, 3000, cookie=4), imm(2, 8, 0x1234, Flag.NOTIFY, cookie=5)])
    return b.build()


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    from sim.job_types import ScenariosJob, Timing
    from sim.jobs import run_job
    from sim.toolchain import missing

    reason = missing()
    if reason:
        pytest.skip(f"cannot simulate here: {reason}")
    scenario = probe()
    timing = Timing(clock_mhz=CLOCK_MHZ, read_latency_ns=LATENCY_NS, write_latency_ns=LATENCY_NS)
    result = run_job(PARAMS, ScenariosJob((scenario,), timing), waves=True,
                     keep=tmp_path_factory.mktemp("waves"))
    return scenario, result


def test_traced_run_still_matches_reference(traced):
    from driver.scenario import Outcome

    scenario, result = traced
    assert_same(Outcome.from_json(result["outcomes"][scenario.name]), reference(scenario))


def test_intervals_are_ordered_and_plausible(traced):
    from sim.waves import measure

    scenario, result = traced
    report = measure(result["vcd"])
    assert report.period_ns == pytest.approx(1000 / CLOCK_MHZ)
    assert report.data_bytes == PARAMS.data_bytes
    posted = [(s["queue"], d) for s in scenario.steps if s["op"] == "post" for d in s["descriptors"]]
    assert [(t.queue, t.length) for t in sorted(report.descriptors, key=lambda t: (t.queue, t.index))] == \
        [(q, d["length"]) for q, d in posted]
    all_beats = sum(-(-d["length"] // PARAMS.data_bytes) + 1 for _, d in posted)
    for t in report.descriptors:
        assert t.last_write_response is not None and t.counter_write is not None, t
        assert t.doorbell < t.last_write_response <= t.counter_write, t
        if t.flags & Flag.IMM:
            assert t.first_read is None
            assert t.last_write_response - t.doorbell >= LATENCY - 2, t
            continue
        assert t.doorbell < t.first_read < t.last_write_response, t
        assert t.doorbell_to_read > 0, t
        # Data comes back a read latency after the request and is answered a write latency after its last
        # beat; at worst it waits behind every other beat of the run (one R and one in-order B channel).
        assert 2 * LATENCY - 4 <= t.read_to_last_response <= 2 * LATENCY + 2 * all_beats + 64, t
        if t.flags & Flag.NOTIFY:  # a NOTIFY descriptor's word follows its last response at once
            assert t.response_to_counter <= 64, t
    # the first descriptor finds the engine idle: its read starts within a few cycles of the doorbell
    # (later ones may wait for buffer space behind earlier copies)
    assert 0 < report.descriptors[0].doorbell_to_read <= 16
    tp = report.throughput()
    assert tp.payload_bytes == sum(d["length"] for _, d in posted), "strobed bytes written must be the payload"
    assert tp.descriptors == len(posted) and tp.gbps > 0


def test_cli_prints_and_writes_json(traced, tmp_path, capsys):
    from arkdma_cli.main import main

    _, result = traced
    out = tmp_path / "waves.json"
    assert main(["sim", "waves", result["vcd"], "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "doorbell_to_read" in printed and "throughput" in printed
    data = json.loads(out.read_text())
    assert len(data["descriptors"]) == 5 and data["throughput"]["payload_bytes"] > 0


def test_missing_or_foreign_vcd_is_a_clear_error(tmp_path):
    pytest.importorskip("vcdvcd", reason="the hw extra (vcdvcd) is not installed here")
    from sim.waves import WaveformError, measure

    with pytest.raises(WaveformError, match="ARKDMA_WAVES=1"):
        measure(tmp_path / "none.vcd")
    foreign = tmp_path / "other.vcd"
    foreign.write_text("$timescale 1ps $end\n$scope module top $end\n$var wire 1 ! clk $end\n$upscope $end\n"
                       "$enddefinitions $end\n#0\n0!\n#2\n1!\n")
    with pytest.raises(WaveformError, match="arkdma_engine"):
        measure(foreign)
