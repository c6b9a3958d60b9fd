"""Shrinks a failing case for engines that play cases in batches (the RTL under a simulator), where
Hypothesis's own shrinking would cost a simulator start per step: every one-step reduction of the case
(drop a queue, drop a run of descriptors, drop the pauses, the control event, shorten latencies) is played in one
batch, the first that still fails the same way is kept, and that repeats until none does."""

from __future__ import annotations

import copy
from collections.abc import Callable

from driver.scenario import Outcome
from sim.fuzz.cases import Case
from sim.fuzz.oracle import judge, signature


def _rebuild(case: Case, steps: list[dict], queues: dict, **changes) -> Case:
    sc = copy.deepcopy(case.scenario)
    sc.steps = steps
    keep = {f"src{q}" for q in queues} | {f"dst{q}" for q in queues} | {f"sig{q}" for q in queues} | {"completions"}
    sc.buffers = [b for b in sc.buffers if b.name in keep]
    return Case(sc, changes.get("control", case.control), queues, changes.get("timing", case.timing),
                changes.get("pause", case.pause))


def drop_queue(case: Case, q: int) -> Case | None:
    if len(case.queues) < 2 or case.control.get("queue") == q:
        return None
    regions = {3 * q, 3 * q + 1, 3 * q + 2}
    steps = [s for s in case.scenario.steps if s.get("queue") != q and not (s["op"] == "region" and s["id"] in regions)]
    return _rebuild(case, steps, {p: v for p, v in case.queues.items() if p != q})


def drop_descriptors(case: Case, q: int, lo: int, hi: int) -> Case:
    queues = copy.deepcopy(case.queues)
    del queues[q]["descriptors"][lo:hi]
    steps = [dict(s, descriptors=queues[q]["descriptors"]) if s["op"] == "post" and s["queue"] == q else s
             for s in case.scenario.steps]
    return _rebuild(case, steps, queues)


def without_control(case: Case) -> Case | None:
    if case.control["kind"] == "none":
        return None
    steps = [s for s in case.scenario.steps if s["op"] not in ("advance", "disable", "reset")]
    return _rebuild(case, steps, case.queues, control={"kind": "none"})


def reductions(case: Case) -> list[Case]:
    out: list[Case | None] = [drop_queue(case, q) for q in case.queues]
    out.append(without_control(case))
    if case.pause is not None:
        out.append(_rebuild(case, case.scenario.steps, case.queues, pause=None))
    for q, spec in case.queues.items():  # chunks first (halves, quarters, ...), then single descriptors
        n, size = len(spec["descriptors"]), len(spec["descriptors"]) // 2
        while size >= 1:
            out += [drop_descriptors(case, q, lo, lo + size) for lo in range(0, n, size)]
            size //= 2
    return [c for c in out if c is not None]


def problems_of(case: Case, out) -> list[str]:
    if out is None:
        return []
    return judge(case, out) if isinstance(out, Outcome) else [str(out)]


def _first_failing(candidates: list[Case], kinds: set[str], run_batch, group: int):
    """The first candidate that fails one of `kinds`' ways, playing `group` candidates per batch."""
    for k in range(0, len(candidates), group):
        chunk = candidates[k : k + group]
        for cand, out in zip(chunk, run_batch(chunk)):
            got = problems_of(cand, out)
            if any(signature([p]) in kinds for p in got):
                return cand, got
    return None


def shrink(case: Case, problems: list[str], run_batch: Callable[[list[Case]], list], max_rounds: int = 60,
           group: int = 8, on_round: Callable[[Case], None] | None = None) -> tuple[Case, list[str]]:
    """The smallest case found that still fails with one of `problems`' kinds, and its problems."""
    kinds = {signature([p]) for p in problems}
    for _ in range(max_rounds):
        found = _first_failing(reductions(case), kinds, run_batch, group)
        if found is None:
            break
        case, problems = found
        if on_round:
            on_round(case)
    return case, problems
