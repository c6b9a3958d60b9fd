"""Checks an engine's Outcome: the scenario's hand-written expectations, then byte-for-byte equality
with the reference engine's Outcome, with messages that point at the first difference."""

from __future__ import annotations

from driver.abi import COMPLETION_COUNT_MASK
from driver.scenario import Outcome, Scenario
from tests.conformance.builder import COMPLETION_STRIDE


def _first_diff(a: bytes, b: bytes) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            n = sum(1 for p, q in zip(a[i:], b[i:]) if p != q)
            return f"first difference at byte {i} ({x:#04x} != {y:#04x}), {n} bytes differ from there"
    return f"lengths {len(a)} != {len(b)}"


def check_expectations(scenario: Scenario, out: Outcome) -> None:
    exp = scenario.expect
    initial = {b.name: b.initial() for b in scenario.buffers}
    for sb, so, db, do, n in exp.get("copied", []):
        got, want = out.buffers[db][do : do + n], initial[sb][so : so + n]
        assert got == want, f"copy {sb}+{so} -> {db}+{do} ({n} bytes) did not arrive: {_first_diff(got, want)}"
    for buf, lo, hi in exp.get("untouched", []):
        got, want = out.buffers[buf][lo:hi], initial[buf][lo:hi]
        assert got == want, f"{buf}[{lo}:{hi}] must be untouched: {_first_diff(got, want)}"
    for db, do, n, sb, so in exp.get("may_run", []):
        got, before, copy = out.buffers[db][do : do + n], initial[db][do : do + n], initial[sb][so : so + n]
        stray = [k for k in range(n) if got[k] not in (before[k], copy[k])]
        assert not stray, (f"{db}[{do}:{do + n}] may hold only its copy or its old bytes after a BUS_ERROR; byte "
                           f"{stray[0]} is {got[stray[0]]:#04x}")
    for buf, off, most in exp.get("count_at_most", []):
        word = int.from_bytes(out.buffers[buf][off : off + 8], "little")
        assert word <= most, f"{buf}+{off} holds the completion word {word:#x}; at most {most} descriptors could be done"
    for buf, off, value in exp.get("values", []):
        got = int.from_bytes(out.buffers[buf][off : off + 8], "little")
        assert got == value, f"{buf}+{off} holds {got:#x}, expected the immediate {value:#x}"
    seen = {o["label"]: o for o in out.observed}
    for label, e in exp.get("errlog", {}).items():
        assert label in seen, f"the error log was never observed at {label!r}"
        o = seen[label]
        if "entries" in e:
            assert len(o["entries"]) == e["entries"], (
                f"{label}: reading the error log popped {len(o['entries'])} entries, expected {e['entries']}")
        assert o["overflow"] == e["overflow"], (
            f"{label}: STATUS.ERRLOG_OVERFLOW reads {int(o['overflow'])}, expected {int(e['overflow'])}")
    for q, e in exp.get("queues", {}).items():
        st = out.queues[int(q)]
        where = f"queue {q}"
        assert st["error"] == e["error"], f"{where}: error {st['error']}, expected {e['error']}"
        assert st["halted"] == e["halted"], f"{where}: halted={st['halted']}, expected {e['halted']}"
        assert st["enabled"] == e["enabled"], f"{where}: enabled={st['enabled']}, expected {e['enabled']}"
        completed = st["completion_word"] & COMPLETION_COUNT_MASK
        assert completed == e["completed"], f"{where}: completed {completed}, expected {e['completed']}"
        assert bool(st["completion_word"] >> 63) == e["halted"], f"{where}: error bit of the completion word"
        if "cookie" in e:
            assert st["error_cookie"] == e["cookie"], f"{where}: cookie {st['error_cookie']:#x}, expected {e['cookie']:#x}"
        if "index" in e:
            assert st["error_index"] == e["index"], f"{where}: error index {st['error_index']}, expected {e['index']}"
        if e.get("in_memory"):
            raw = out.buffers["completions"][int(q) * COMPLETION_STRIDE : int(q) * COMPLETION_STRIDE + 8]
            word = int.from_bytes(raw, "little")
            assert word == st["completion_word"], (
                f"{where}: completion word in memory {word:#x} != engine's {st['completion_word']:#x} at quiescence"
            )


def assert_same(out: Outcome, ref: Outcome, scenario: Scenario | None = None) -> None:
    """Byte for byte, except the ranges the scenario says may differ from the sequential reference
    (descriptors an engine may have started behind a BUS_ERROR; check_expectations bounds them)."""
    exp = scenario.expect if scenario is not None else {}
    may = exp.get("may_run", []) + [[buf, off, 8, None, None] for buf, off, _ in exp.get("count_at_most", [])]
    for name, want in ref.buffers.items():
        got = out.buffers[name]
        if any(db == name for db, *_ in may):
            masked = bytearray(got)
            for db, do, n, _, _ in may:
                if db == name:
                    masked[do : do + n] = want[do : do + n]
            got = bytes(masked)
        assert got == want, f"buffer {name} differs from the reference: {_first_diff(got, want)}"
    assert out.queues == ref.queues, f"queue states differ:\n engine    {out.queues}\n reference {ref.queues}"
    assert out.errlog == ref.errlog, f"error logs differ:\n engine    {out.errlog}\n reference {ref.errlog}"
    assert out.observed == ref.observed, (
        f"error log observations differ:\n engine    {out.observed}\n reference {ref.observed}")
    assert out.errlog_overflow == ref.errlog_overflow, (
        f"STATUS.ERRLOG_OVERFLOW at the end: {out.errlog_overflow}, reference {ref.errlog_overflow}")
    assert (out.descriptors, out.bytes) == (ref.descriptors, ref.bytes), (
        f"counters (descriptors, bytes) {(out.descriptors, out.bytes)} != reference {(ref.descriptors, ref.bytes)}"
    )
