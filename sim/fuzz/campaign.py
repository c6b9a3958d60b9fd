"""A time-bounded campaign of generated cases on one engine: Hypothesis runs under the "arkdma-campaign"
profile, one after another until the time is spent, every case judged by sim.fuzz.oracle. A failure is
shrunk by Hypothesis to a minimal case (in-process engines) and written as a JSON reproducer.

The RTL engine plays each round's cases in one simulator run (a run per case would cost seconds of start-up
each); a new kind of failure there is shrunk by sim/fuzz/shrink.py, which plays reductions in batches."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import given, seed, settings

from driver.scenario import Outcome
from sim.fuzz import profiles
from sim.fuzz.cases import Case, cases
from sim.fuzz.oracle import judge, signature
from sim.fuzz.shrink import shrink


@dataclass
class Finding:
    problems: list[str]
    case: Case
    shrunk: bool
    file: Path | None = None


@dataclass
class Tally:
    engine: str
    cases: int = 0
    descriptors: int = 0
    bytes: int = 0
    rounds: int = 0
    seconds: float = 0.0
    controls: dict = field(default_factory=lambda: {"none": 0, "disable": 0, "reset": 0})
    findings: list[Finding] = field(default_factory=list)

    def count(self, case: Case) -> None:
        self.cases += 1
        self.descriptors += case.descriptors
        self.bytes += case.bytes
        self.controls[case.control["kind"]] += 1


class _Falsified(AssertionError):
    pass


class Campaign:
    def __init__(self, engine: str, run_case: Callable[[Case], Outcome] | None, out_dir: Path,
                 bus_errors: bool = True, safe: bool = False, max_findings: int = 20,
                 run_batch: Callable[[list[Case]], list] | None = None, batch: int = 40, max_descriptors: int = 32,
                 shrink_batched: bool = True, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.tally = Tally(engine)
        self.run_case, self.run_batch, self.batch, self.shrink_batched = run_case, run_batch, batch, shrink_batched
        self.out_dir, self.max_findings = out_dir, max_findings
        self._seen: set[str] = set()
        self._cases = cases(max_descriptors=max_descriptors, bus_errors=bus_errors, safe=safe)

    def record(self, problems: list[str], case: Case, shrunk: bool, key: str | None = None) -> None:
        """Write a reproducer for the first failure of each kind (`key`: the kind as first seen)."""
        key = key or signature(problems)
        if key in self._seen or len(self.tally.findings) >= self.max_findings:
            return
        self._seen.add(key)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / f"{self.tally.engine}-{len(self.tally.findings) + 1:02d}.json"
        path.write_text(json.dumps({"engine": self.tally.engine, "problems": problems, "shrunk": shrunk,
                                    "case": case.to_json()}, indent=1))
        self.tally.findings.append(Finding(problems, case, shrunk, path))

    def _round_in_process(self, round_seed: int, deadline: float) -> None:
        last: list = []  # once set, Hypothesis is shrinking: every example runs, whatever the time

        @seed(round_seed)
        @settings(settings.get_profile(profiles.CAMPAIGN))
        @given(self._cases)
        def prop(case: Case) -> None:
            if not last and self.clock() >= deadline:
                return  # time is up and nothing failed: the round's remaining examples pass unrun
            self.tally.count(case)
            problems = judge(case, self.run_case(case))
            if problems:
                last[:] = [problems, case]
                raise _Falsified("; ".join(problems))

        try:
            prop()
        except _Falsified:
            self.record(last[0], last[1], shrunk=True)  # Hypothesis replays the minimal case last

    def _round_batched(self, round_seed: int) -> None:
        drawn: list[Case] = []

        @seed(round_seed)
        @settings(profiles.collect_settings(profiles.CAMPAIGN, self.batch))
        @given(self._cases)
        def collect(case: Case) -> None:
            drawn.append(case)

        collect()
        for case, out in zip(drawn, self.run_batch(drawn)):
            if out is None:
                continue
            self.tally.count(case)
            problems = judge(case, out) if isinstance(out, Outcome) else [str(out)]
            key = signature(problems)
            if problems and key not in self._seen:
                if self.shrink_batched:
                    case, problems = shrink(case, problems, self.run_batch)
                self.record(problems, case, shrunk=self.shrink_batched, key=key)

    def run(self, seconds: float, on_progress: Callable[[Tally], None] | None = None,
            rng: random.Random | None = None) -> Tally:
        rng = rng or random.Random()
        t0 = self.clock()
        while self.clock() - t0 < seconds:
            round_seed = rng.getrandbits(32)
            if self.run_batch is not None:
                self._round_batched(round_seed)
            else:
                self._round_in_process(round_seed, t0 + seconds)
            self.tally.rounds += 1
            self.tally.seconds = self.clock() - t0
            if on_progress:
                on_progress(self.tally)
        return self.tally


def load_reproducer(path: Path) -> tuple[Case, dict]:
    """A reproducer written by a campaign: the Case and the rest of the record (engine, problems)."""
    data = json.loads(Path(path).read_text())
    return Case.from_json(data["case"]), data
