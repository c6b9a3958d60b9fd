"""Judges an engine's Outcome for a generated Case by the rules of docs/abi-rules.md: byte-for-byte equality
with the reference engine, except where the rules let an engine differ from the sequential reference:

- after a BUS_ERROR, the failing descriptor's destination may hold anything, and later descriptors of the
  queue without FENCE or IMM may have written their own destinations (each byte untouched or its copy's);
- after a disable in flight, the prefix rule: the reference run with the completed prefix posted;
- after a global reset in flight (a hard stop), every byte is untouched or the byte some descriptor of the
  case puts there, the counters, queues and error log are cleared, and nothing outside a destination moved.

Liveness: at the end each queue's completion word in memory equals the engine's own. Returns the problems
found, as sentences."""

from __future__ import annotations

import re

from driver.abi import COMPLETION_COUNT_MASK, COMPLETION_ERROR_BIT, FLAGS_VALID, Flag, Perm
from driver.player import play
from driver.reference_engine import ReferenceEngine
from driver.scenario import Outcome, Scenario
from sim.fuzz.cases import COMPLETION_STRIDE, HOLE_REGION, Case

ANY = None  # a byte that may hold any value (the destination of a descriptor that failed with BUS_ERROR)
Allowed = dict[str, dict[int, object]]  # buffer -> position -> set of values it may hold, or ANY


def reference(case: Case, keep: dict[int, int] | None = None) -> Outcome:
    """The reference engine's outcome; with `keep`, queue q posts only its first keep[q] descriptors and the
    control event happens once everything posted has run (the prefix the rule allows)."""
    steps = []
    for s in case.scenario.steps:
        if keep is not None and s["op"] == "advance":
            steps.append({"op": "wait_idle"})
            continue
        if keep is not None and s["op"] == "post":
            s = dict(s, descriptors=s["descriptors"][: keep.get(s["queue"], len(s["descriptors"]))])
        steps.append(s)
    sc = Scenario(**{**case.scenario.__dict__, "steps": steps})
    with ReferenceEngine(sc.num_queues, sc.slots, sc.num_regions) as engine:
        return play(engine, sc)


def signature(problems: list[str]) -> str:
    """What a failure looks like with its numbers taken out: one finding per kind of failure."""
    return re.sub(r"0x[0-9a-f]+|\d+", "N", problems[0]) if problems else ""


def memory_word(out: Outcome, q: int) -> int:
    raw = out.buffers["completions"][q * COMPLETION_STRIDE : q * COMPLETION_STRIDE + 8]
    return int.from_bytes(raw, "little")


class _Layout:
    """The case's regions and initial buffer contents, computed once per judgement."""

    def __init__(self, case: Case):
        self.regions = {s["id"]: s for s in case.scenario.steps if s["op"] == "region"}
        self.initial = {b.name: b.initial() for b in case.scenario.buffers}


def _landing(lay: _Layout, d: dict) -> tuple[str, int, bytes | None] | None:
    """Where descriptor `d` writes in the case's buffers and what: (buffer, position, bytes), bytes ANY for a
    read from unbacked memory; None when it can write nothing (it fails its checks or targets the hole)."""
    regions = lay.regions
    if d["flags"] & ~FLAGS_VALID or d["reserved"]:
        return None
    dst = regions.get(d["dst_region"])
    if dst is None or not dst["perms"] & Perm.WRITE or d["dst_offset"] + d["length"] > dst["size"]:
        return None
    at = dst["offset"] + d["dst_offset"]
    if d["flags"] & Flag.IMM:
        if d["length"] != 8 or at % 8:
            return None
        return dst["buffer"], at, d["src_offset"].to_bytes(8, "little")
    if d["src_region"] == HOLE_REGION:
        return dst["buffer"], at, ANY if d["length"] else b""
    src = regions.get(d["src_region"])
    if src is None or not src["perms"] & Perm.READ or d["src_offset"] + d["length"] > src["size"]:
        return None
    if src["id"] == dst["id"] and max(d["src_offset"], d["dst_offset"]) < min(d["src_offset"], d["dst_offset"]) + d["length"]:
        return None
    initial = lay.initial[src["buffer"]]
    lo = src["offset"] + d["src_offset"]
    return dst["buffer"], at, initial[lo : lo + d["length"]]


def _allow(allowed: Allowed, lay: _Layout, d: dict, anything: bool = False) -> None:
    """Let the bytes descriptor `d` writes hold what it puts there (or, with `anything`, any value)."""
    land = _landing(lay, d)
    if land is None:
        return
    name, at, data = land
    where = allowed.setdefault(name, {})
    if data is ANY or anything:
        for p in range(at, at + d["length"]):
            where[p] = ANY
        return
    for k, v in enumerate(data):
        ok = where.setdefault(at + k, set())
        if ok is not ANY:
            ok.add(v)


def _after_bus_errors(case: Case, ref: Outcome) -> Allowed:
    """What the BUS_ERROR rule lets an engine write beyond the sequential reference."""
    allowed: Allowed = {}
    lay = _Layout(case)
    for q, st in ref.queues.items():
        if st["error"] != "BUS_ERROR" or q not in case.queues:
            continue
        descs = case.queues[q]["descriptors"]
        failing = (st["error_index"] - case.queues[q]["start"]) % (1 << 32)
        _allow(allowed, lay, descs[failing], anything=True)
        for later in descs[failing + 1 :]:
            if not later["flags"] & (Flag.FENCE | Flag.IMM):
                _allow(allowed, lay, later)
    return allowed


def _everything(case: Case) -> Allowed:
    """After a reset in flight: any descriptor of the case may have written any part of its destination."""
    allowed: Allowed = {}
    lay = _Layout(case)
    for spec in case.queues.values():
        for d in spec["descriptors"]:
            _allow(allowed, lay, d)
    return allowed


def _first_diff(name: str, got: bytes, want: bytes, allowed: dict[int, object]) -> str | None:
    if len(got) != len(want):
        return f"buffer {name}: length {len(got)} != {len(want)}"
    for i, (x, y) in enumerate(zip(got, want)):
        if x == y:
            continue
        ok = allowed.get(i, set())
        if ok is ANY or x in ok:
            continue
        n = sum(1 for p, r in zip(got[i:], want[i:]) if p != r)
        return (f"buffer {name} differs from the reference: first difference at byte {i} ({x:#04x}, reference "
                f"{y:#04x}), {n} bytes differ from there")
    return None


def compare(case: Case, out: Outcome, ref: Outcome, skip: tuple[str, ...] = (), allowed: Allowed | None = None,
            buffers: dict[str, bytes] | None = None) -> list[str]:
    """Problems with `out` against `ref`: buffers (against `buffers` when given, bytes in `allowed` excepted),
    queue states, error log and its overflow flag, and counters."""
    allowed = _after_bus_errors(case, ref) if allowed is None else allowed
    want_buffers = ref.buffers if buffers is None else buffers
    problems = []
    for name, want in want_buffers.items():
        if name not in skip:
            p = _first_diff(name, out.buffers[name], want, allowed.get(name, {}))
            if p:
                problems.append(p)
    if out.queues != ref.queues:
        for q in sorted(ref.queues):
            if out.queues.get(q) != ref.queues[q]:
                problems.append(f"queue {q} state {out.queues.get(q)} != reference {ref.queues[q]}")
    if out.errlog != ref.errlog:
        problems.append(f"error log {out.errlog} != reference {ref.errlog}")
    if out.errlog_overflow != ref.errlog_overflow:
        problems.append(f"STATUS.ERRLOG_OVERFLOW {int(out.errlog_overflow)} != reference {int(ref.errlog_overflow)}")
    if out.observed != ref.observed:
        problems.append(f"error log observations {out.observed} != reference {ref.observed}")
    if (out.descriptors, out.bytes) != (ref.descriptors, ref.bytes):
        problems.append(f"counters (descriptors, bytes) {(out.descriptors, out.bytes)} != reference "
                        f"{(ref.descriptors, ref.bytes)}")
    return problems


def liveness(case: Case, out: Outcome) -> list[str]:
    """At the end each queue's completion word in memory equals the engine's own (a stall names the queue)."""
    problems = []
    for q in case.queues:
        st = out.queues.get(q)
        if st is None:
            continue
        word = memory_word(out, q)
        if word != st["completion_word"]:
            problems.append(f"liveness: queue {q} stuck: completion word in memory {word:#x} != engine's "
                            f"{st['completion_word']:#x} (enabled={st['enabled']}, halted={st['halted']}, "
                            f"error {st['error']})")
    return problems


def _prefix_after_disable(case: Case, out: Outcome) -> tuple[dict[int, int], list[str]]:
    q = case.control["queue"]
    start, n = case.queues[q]["start"], len(case.queues[q]["descriptors"])
    word = memory_word(out, q)
    done = ((word & COMPLETION_COUNT_MASK) - start) % (1 << 63) + (1 if word >> COMPLETION_ERROR_BIT else 0)
    if not 0 <= done <= n:
        return {}, [f"prefix rule: queue {q}'s completion word {word:#x} after disable is outside "
                    f"start {start} .. start + {n} posted"]
    return {q: done}, []


def judge(case: Case, out: Outcome) -> list[str]:
    """Every problem with `out`, or [] when the engine did what the rules say."""
    kind = case.control["kind"]
    if kind == "none":
        return compare(case, out, reference(case)) + liveness(case, out)
    if kind == "disable":
        keep, problems = _prefix_after_disable(case, out)
        if problems:
            return problems
        return compare(case, out, reference(case, keep)) + liveness(case, out)
    # A reset is a hard stop: no completion word is promised, every other byte is untouched or landed.
    initial = {b.name: b.initial() for b in case.scenario.buffers}
    return compare(case, out, reference(case), skip=("completions",), allowed=_everything(case), buffers=initial)
