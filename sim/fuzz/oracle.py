"""Judges an engine's Outcome for a generated Case: byte-for-byte equality with the reference engine, the
prefix rule of docs/abi-rules.md after a disable or a reset in flight, and liveness (each queue's completion
word in memory equals the engine's own at the end). Returns the problems found, as sentences."""

from __future__ import annotations

import re

from driver.abi import COMPLETION_COUNT_MASK, COMPLETION_ERROR_BIT
from driver.reference_engine import ReferenceEngine
from driver.scenario import Outcome, Scenario, play
from sim.fuzz.cases import COMPLETION_STRIDE, Case

MASK_CODES = ("BUS_ERROR",)  # the failing descriptor may have written part of its destination


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


def _first_diff(a: bytes, b: bytes) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            n = sum(1 for p, r in zip(a[i:], b[i:]) if p != r)
            return f"first difference at byte {i} ({x:#04x}, reference {y:#04x}), {n} bytes differ from there"
    return f"lengths {len(a)} != {len(b)}"


def _region_offsets(case: Case) -> dict[int, int]:
    return {s["id"]: s["offset"] for s in case.scenario.steps if s["op"] == "region"}


def _masked(case: Case, ref: Outcome, buffers: dict[str, bytes]) -> dict[str, bytes]:
    """Buffers with the destination of a descriptor that failed with BUS_ERROR blanked (it may be partly written)."""
    out = dict(buffers)
    offsets = _region_offsets(case)
    for q, st in ref.queues.items():
        if st["error"] not in MASK_CODES or q not in case.queues:
            continue
        d = case.queues[q]["descriptors"][(st["error_index"] - case.queues[q]["start"]) % (1 << 32)]
        rd = d["dst_region"]
        if rd == 3 * q + 1:
            lo = offsets[rd] + d["dst_offset"]
            name = f"dst{q}"
            b = bytearray(out[name])
            b[lo : lo + d["length"]] = bytes(min(d["length"], len(b) - lo))
            out[name] = bytes(b)
    return out


def compare(case: Case, out: Outcome, ref: Outcome, skip: tuple[str, ...] = ()) -> list[str]:
    problems = []
    got, want = _masked(case, ref, out.buffers), _masked(case, ref, ref.buffers)
    for name, w in want.items():
        if name not in skip and got[name] != w:
            problems.append(f"buffer {name} differs from the reference: {_first_diff(got[name], w)}")
    if out.queues != ref.queues:
        for q in sorted(ref.queues):
            if out.queues.get(q) != ref.queues[q]:
                problems.append(f"queue {q} state {out.queues.get(q)} != reference {ref.queues[q]}")
    if out.errlog != ref.errlog:
        problems.append(f"error log {out.errlog} != reference {ref.errlog}")
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
    done = (word & COMPLETION_COUNT_MASK) - start + (1 if word >> COMPLETION_ERROR_BIT else 0)
    if not 0 <= done <= n:
        return {}, [f"prefix rule: queue {q}'s completion word {word:#x} after disable is outside "
                    f"start {start} .. start + {n} posted"]
    return {q: done}, []


def _prefix_after_reset(case: Case, out: Outcome, strict_word: bool) -> tuple[dict[int, int], list[str]]:
    """The count per queue whose reference prefix its buffers match; none matching breaks the rule."""
    keep, problems = {}, []
    for q, spec in case.queues.items():
        names = (f"src{q}", f"dst{q}", f"sig{q}")
        found = None
        for k in range(len(spec["descriptors"]) + 1):
            ref = reference(case, {p: k if p == q else len(s["descriptors"]) for p, s in case.queues.items()})
            got, want = _masked(case, ref, out.buffers), _masked(case, ref, ref.buffers)
            if all(got[nm] == want[nm] for nm in names):
                found = k
                break
        if found is None:
            problems.append(f"prefix rule: after the reset queue {q}'s memory matches no prefix of its "
                            f"{len(spec['descriptors'])} descriptors (a descriptor partly done, or one above the "
                            f"count touched memory)")
            continue
        keep[q] = found
        count = memory_word(out, q) & COMPLETION_COUNT_MASK
        if strict_word and count != spec["start"] + found:
            problems.append(f"prefix rule: after the reset queue {q}'s completion word says {count - spec['start']} "
                            f"done but {found} descriptors landed")
    return keep, problems


def judge(case: Case, out: Outcome, strict_reset_word: bool = False) -> list[str]:
    """Every problem with `out`, or [] when the engine did what the rules say."""
    kind = case.control["kind"]
    if kind == "none":
        return compare(case, out, reference(case)) + liveness(case, out)
    if kind == "disable":
        keep, problems = _prefix_after_disable(case, out)
        if problems:
            return problems
        return compare(case, out, reference(case, keep)) + liveness(case, out)
    keep, problems = _prefix_after_reset(case, out, strict_reset_word)
    if problems:
        return problems
    # The reset clears the queues: the words in memory are checked above (strict) or not at all.
    return compare(case, out, reference(case, keep), skip=("completions",))
