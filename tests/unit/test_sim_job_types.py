"""Simulation jobs are typed records: each goes to JSON and back unchanged, and a job file that names an
unknown kind or pause is refused with what is known."""

from __future__ import annotations

import json

import pytest

from driver.workload import WorkloadSpec
from sim.job_types import (BatchJob, BenchAcceptJob, BenchSizeJob, PeriodicPause, RandomPause, ResetInFlightJob,
                           ScenariosJob, Timing, WorkloadJob, job_from_json, job_to_json, kind_of)
from tests.conformance.scenarios import all_scenarios

A, B = all_scenarios()[:2]
JOBS = [
    ScenariosJob((A, B)),
    ScenariosJob((A,), Timing(clock_mhz=125.0, read_latency_ns=40.0), RandomPause(0.3, 7)),
    ResetInFlightJob(A, reset_after=700, settle=2000, then=B, pause=PeriodicPause(6, 4)),
    WorkloadJob(WorkloadSpec(sizes=(64, 4096), bytes_per_size=1 << 16), Timing()),
    BenchSizeJob(4096, 256, 16, Timing(read_latency_ns=1770.0)),
    BenchAcceptJob(16),
    BatchJob((ScenariosJob((B,), pause=RandomPause(0.1, 1)), ResetInFlightJob(A, 1, 2, B)), Timing(write_latency_ns=8.0)),
]


@pytest.mark.parametrize("job", JOBS, ids=lambda j: kind_of(j))
def test_a_job_survives_its_json(job):
    text = json.dumps(job_to_json(job))
    back = job_from_json(json.loads(text))
    assert type(back) is type(job)
    assert json.dumps(job_to_json(back)) == text  # (a scenario's int keys come back as JSON's strings)
    if not isinstance(job, (ScenariosJob, ResetInFlightJob, BatchJob)):
        assert back == job


def test_unknown_kinds_are_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown simulation job kind 'bench'; known: scenarios"):
        job_from_json({"kind": "bench", "step": "size"})
    with pytest.raises(ValueError, match="pause kind must be one of random, periodic"):
        job_from_json({"kind": "scenarios", "scenarios": [], "pause": {"kind": "sometimes"}})
    with pytest.raises(TypeError):
        job_from_json({"kind": "bench_accept", "count": 4, "colour": "red"})
