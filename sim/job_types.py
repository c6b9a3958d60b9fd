"""What one simulator run is asked to do: typed jobs (frozen dataclasses) with their JSON form.

The host side (sim/jobs.py run_job, the providers, `arkdma sim bench`, the tests) builds a job; it travels to
the simulator as JSON (the job file); sim/session.py reads it back with `job_from_json` and dispatches on its
type. Plain Python: no cocotb here, so building a job needs no simulator.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from driver.scenario import Scenario
from driver.workload import WorkloadSpec

ROUND_TRIP_NS = 1770.0  # GPU <-> host PCIe round trip measured on an H100 (BASELINES.md): the default latencies


@dataclass(frozen=True)
class Timing:
    """Clock and memory latencies of a simulation; defaults are a 250 MHz engine behind PCIe."""

    clock_mhz: float = 250.0
    read_latency_ns: float = ROUND_TRIP_NS  # read address -> first data beat
    write_latency_ns: float = ROUND_TRIP_NS  # last write beat -> write response

    @property
    def period_ns(self) -> float:
        return 1000.0 / self.clock_mhz

    def cycles(self, ns: float) -> int:
        return round(ns / self.period_ns)


@dataclass(frozen=True)
class RandomPause:
    """Each cycle each AXI channel pauses with `probability` (seeded per channel)."""

    probability: float
    seed: int


@dataclass(frozen=True)
class PeriodicPause:
    """`run` cycles of traffic, then `idle` cycles of idle, on every channel."""

    run: int
    idle: int


Pause = RandomPause | PeriodicPause


@dataclass(frozen=True)
class ScenariosJob:
    """Conformance scenarios, each from a clean engine; the result is {"outcomes": {name: Outcome JSON}}."""

    scenarios: tuple[Scenario, ...]
    timing: Timing = Timing()
    pause: Pause | None = None


@dataclass(frozen=True)
class ResetInFlightJob:
    """`scenario`'s steps, `reset_after` cycles of running, a global reset, `settle` cycles of watching memory,
    then `then` on the engine as the reset left it (sim/stress_jobs.py says what the result holds)."""

    scenario: Scenario
    reset_after: int
    settle: int
    then: Scenario
    pause: Pause | None = None


@dataclass(frozen=True)
class WorkloadJob:
    """`arkdma demo`'s workload; the result has its rows, the cycles and the wall seconds."""

    spec: WorkloadSpec
    timing: Timing = Timing()


@dataclass(frozen=True)
class BenchSizeJob:
    """One size of `arkdma sim bench`: a descriptor alone, then a stream of `count`."""

    size: int
    count: int
    notify_every: int
    timing: Timing = Timing()


@dataclass(frozen=True)
class BenchAcceptJob:
    """The doorbell accept rate of `arkdma sim bench` over `count` descriptors."""

    count: int
    timing: Timing = Timing()


@dataclass(frozen=True)
class BatchJob:
    """Several scenario or reset jobs on one testbench in one simulator run, each under its own pauses."""

    jobs: tuple[ScenariosJob | ResetInFlightJob, ...]
    timing: Timing = Timing()


Job = ScenariosJob | ResetInFlightJob | WorkloadJob | BenchSizeJob | BenchAcceptJob | BatchJob
KINDS: dict[str, type] = {"scenarios": ScenariosJob, "reset_in_flight": ResetInFlightJob, "workload": WorkloadJob,
                          "bench_size": BenchSizeJob, "bench_accept": BenchAcceptJob, "batch": BatchJob}
_KIND_OF = {cls: kind for kind, cls in KINDS.items()}
_PAUSES = {"random": RandomPause, "periodic": PeriodicPause}


def kind_of(job: Job) -> str:
    return _KIND_OF[type(job)]


def _value_to_json(value):
    if isinstance(value, Scenario):
        return value.to_json()
    if isinstance(value, (RandomPause, PeriodicPause)):
        return {"kind": next(k for k, c in _PAUSES.items() if isinstance(value, c)), **asdict(value)}
    if isinstance(value, tuple) and value and isinstance(value[0], (ScenariosJob, ResetInFlightJob)):
        return [job_to_json(j) for j in value]
    if isinstance(value, tuple):
        return [_value_to_json(v) for v in value]
    if isinstance(value, (Timing, WorkloadSpec)):
        return asdict(value)
    return value


def job_to_json(job: Job) -> dict:
    return {"kind": kind_of(job), **{f.name: _value_to_json(getattr(job, f.name)) for f in fields(job)}}


def pause_from_json(d: dict | None) -> Pause | None:
    if d is None:
        return None
    kind = d.get("kind")
    if kind not in _PAUSES:
        raise ValueError(f"pause kind must be one of {', '.join(_PAUSES)}, not {kind!r}")
    return _PAUSES[kind](**{k: v for k, v in d.items() if k != "kind"})


def job_from_json(d: dict) -> Job:
    kind = d.get("kind")
    if kind not in KINDS:
        raise ValueError(f"unknown simulation job kind {kind!r}; known: {', '.join(KINDS)}")
    v = {k: val for k, val in d.items() if k != "kind"}
    if "timing" in v:
        v["timing"] = Timing(**v["timing"])
    if "pause" in v:
        v["pause"] = pause_from_json(v["pause"])
    for name in ("scenario", "then"):
        if name in v:
            v[name] = Scenario.from_json(v[name])
    if "scenarios" in v:
        v["scenarios"] = tuple(Scenario.from_json(s) for s in v["scenarios"])
    if "spec" in v:
        v["spec"] = WorkloadSpec(**{k: tuple(x) if isinstance(x, list) else x for k, x in v["spec"].items()})
    if "jobs" in v:
        v["jobs"] = tuple(job_from_json(j) for j in v["jobs"])
    return KINDS[kind](**v)
