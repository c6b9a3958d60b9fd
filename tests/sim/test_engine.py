"""The whole engine under cocotb/Verilator: conformance scenarios under idle and backpressure on every AXI
channel, a global reset with descriptors in flight, and seeded random traffic of 10,000 descriptors over
four queues, each compared byte for byte with the reference engine.

Everything runs as one batch job (one simulator start) on the conformance suite's build of the engine."""

from __future__ import annotations

import pytest

from rtl.params import EngineParams
from sim.job_types import BatchJob, PeriodicPause, RandomPause, ResetInFlightJob, ScenariosJob, Timing
from tests.conformance.builder import COMPLETION_STRIDE, GEOMETRY, GUARD_BYTE
from tests.conformance.compare import assert_same, check_expectations
from tests.conformance.scenarios import all_scenarios, random_stream
from tests.conformance.test_conformance import reference, reference_for
from tests.sim.traffic import full_windows, random_traffic

pytestmark = pytest.mark.sim
PARAMS = EngineParams(data_width=512, **GEOMETRY)  # the build the conformance suite uses
RANDOM_PAUSE = RandomPause(probability=0.3, seed=3)
PERIODIC_IDLE = PeriodicPause(run=6, idle=4)
SCENARIOS = {s.name: s for s in all_scenarios()}
# The default run plays a cheap selection under pauses (every byte moved costs Python time in the bus
# models); the slow run plays every scenario under both.
UNDER_RANDOM_PAUSE = ["size_1", "size_65", "size_4097", "fence_chain", "disable_in_flight", "doorbell_wrap",
                      "error_hole_bus_error", "error_src_past_end", "error_overlap", "error_ring_overflow",
                      "error_doorbell_backwards", "error_completion_location"]
UNDER_PERIODIC_IDLE = ["ring_wrap", "ring_exactly_full", "zero_length", "errors_on_two_queues", "restart_after_error",
                       "reset_and_reuse"]
TRAFFIC = random_traffic(seed=2026, per_queue=2500, max_bytes=1024)
TIMING = Timing(read_latency_ns=200.0, write_latency_ns=200.0)  # shorter than PCIe's: fewer idle cycles to simulate
WINDOWS, WINDOW_COPIES = full_windows()
AFTER_RESET = random_stream(9, queues=2, count=30)


def _reset_job(pause: RandomPause | None) -> ResetInFlightJob:
    return ResetInFlightJob(WINDOWS, reset_after=700, settle=2000, then=AFTER_RESET, pause=pause)


JOBS = {
    "random_pause": ScenariosJob(tuple(SCENARIOS[n] for n in UNDER_RANDOM_PAUSE), pause=RANDOM_PAUSE),
    "periodic_idle": ScenariosJob(tuple(SCENARIOS[n] for n in UNDER_PERIODIC_IDLE), pause=PERIODIC_IDLE),
    "reset": _reset_job(None),
    "reset_paused": _reset_job(RANDOM_PAUSE),
    "traffic": ScenariosJob((TRAFFIC,)),
}


def run_batch(jobs: dict[str, ScenariosJob | ResetInFlightJob]) -> dict[str, dict]:
    from sim.jobs import run_job
    from sim.toolchain import missing

    reason = missing()
    if reason:
        pytest.skip(f"cannot simulate here: {reason}")
    result = run_job(PARAMS, BatchJob(tuple(jobs.values()), TIMING))
    return dict(zip(jobs, result["results"]))


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    return run_batch(JOBS)


def _check_scenario(name: str, raw: dict) -> None:
    from driver.scenario import Outcome

    scenario = SCENARIOS.get(name) or TRAFFIC
    out = Outcome.from_json(raw)
    check_expectations(scenario, out)
    assert_same(out, reference_for(scenario, out), scenario)


@pytest.mark.parametrize("name", UNDER_RANDOM_PAUSE)
def test_backpressure_every_channel(results, name):
    _check_scenario(name, results["random_pause"]["outcomes"][name])


@pytest.mark.parametrize("name", UNDER_PERIODIC_IDLE)
def test_idle_cycles_every_channel(results, name):
    _check_scenario(name, results["periodic_idle"]["outcomes"][name])


def test_random_traffic_10k_descriptors(results):
    from driver.scenario import Outcome

    out = Outcome.from_json(results["traffic"]["outcomes"][TRAFFIC.name])
    assert_same(out, reference(TRAFFIC))
    posted = sum(len(s["descriptors"]) for s in TRAFFIC.steps if s["op"] == "post")
    assert posted >= 10_000
    assert out.queues[3]["error"] == "OUT_OF_BOUNDS" and out.queues[3]["halted"]
    assert all(out.queues[q]["error"] == "NONE" for q in range(3))
    assert out.descriptors >= posted - 5, "every descriptor before the failing one completes"


@pytest.mark.parametrize("job", ["reset", "reset_paused"])
def test_reset_with_descriptors_in_flight(results, job):
    from driver.scenario import Outcome

    r = results[job]
    total = sum(len(c) for c in WINDOW_COPIES.values())
    assert r["writes_at_reset"] > 0 and r["completed_at_reset"] < total, (
        f"the reset did not land mid-stream ({r['completed_at_reset']} of {total} done, "
        f"{r['writes_at_reset']} writes): change reset_after")
    assert r["late_writes"] == [], f"memory written after the reset finished: {r['late_writes'][:5]}"
    assert r["counters_after"] == [0, 0]
    assert r["errlog_after"] == 0
    for q in r["queues_after"]:
        assert not (q["enabled"] or q["halted"] or q["busy"]) and q["completion_word"] == 0, q

    src = WINDOWS.buffers[0].initial()
    buffers = {k: bytes.fromhex(v) for k, v in r["buffers"].items()}
    for q, copies in WINDOW_COPIES.items():
        word = int.from_bytes(buffers["completions"][q * COMPLETION_STRIDE :][:8], "little")
        assert word >> 63 == 0 and word <= len(copies), f"queue {q}: completion word {word:#x}"
        dst = buffers[f"dst{q}"]
        expected_guard = bytearray([GUARD_BYTE]) * len(dst)
        for i, (s, d, n) in enumerate(copies):
            got, want = dst[d : d + n], src[s : s + n]
            if i < word:
                assert got == want, f"queue {q}: copy {i} is below the completed count {word} but not all there"
            else:  # not covered by the counter: each byte either untouched or the right one, nothing else
                assert all(g in (GUARD_BYTE, w) for g, w in zip(got, want)), f"queue {q}: copy {i} wrote garbage"
            expected_guard[d : d + n] = dst[d : d + n]
        assert dst == bytes(expected_guard), f"queue {q}: bytes outside every destination were written"

    out = Outcome.from_json(r["then"])
    check_expectations(AFTER_RESET, out)
    assert_same(out, reference(AFTER_RESET))


@pytest.mark.slow
@pytest.mark.parametrize("pause", [RANDOM_PAUSE, PERIODIC_IDLE], ids=["random_pause", "periodic_idle"])
def test_every_scenario_under_pauses(pause):
    names = [n for n in SCENARIOS if n != "size_1048576"]
    raw = run_batch({"all": ScenariosJob(tuple(SCENARIOS[n] for n in names), pause=pause)})
    for name in names:
        _check_scenario(name, raw["all"]["outcomes"][name])


@pytest.mark.slow
def test_random_traffic_100k_descriptors():
    big = random_traffic(seed=7, per_queue=25_000, max_bytes=4096)
    from driver.scenario import Outcome

    raw = run_batch({"traffic": ScenariosJob((big,))})["traffic"]
    out = Outcome.from_json(raw["outcomes"][big.name])
    assert_same(out, reference(big))
    assert out.queues[3]["halted"] and all(out.queues[q]["error"] == "NONE" for q in range(3))

