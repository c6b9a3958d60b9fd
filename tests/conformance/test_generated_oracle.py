"""The generated suite's oracle (sim/fuzz/oracle.py) catches what it must: outcomes of the reference engine,
damaged the way a broken engine would damage them, are each reported."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("hypothesis")

from sim.fuzz.cases import COMPLETION_STRIDE, GUARD, build_case, plan  # noqa: E402
from sim.fuzz.oracle import judge, reference  # noqa: E402

COPIES = [("copy", 1000, 0), ("copy", 4097, 0), ("imm", 0xFEED, 1), ("copy", 64, 0)]


def _damaged(out, buffer: str, offset: int, value: int):
    b = bytearray(out.buffers[buffer])
    b[offset] = value
    return dataclasses.replace(out, buffers={**out.buffers, buffer: bytes(b)})


def _word(out, q: int, word: int):
    b = bytearray(out.buffers["completions"])
    b[q * COMPLETION_STRIDE : q * COMPLETION_STRIDE + 8] = word.to_bytes(8, "little")
    return dataclasses.replace(out, buffers={**out.buffers, "completions": bytes(b)})


def test_reference_passes_its_own_oracle():
    case = build_case({0: plan(COPIES, dst_skew=5), 1: plan(COPIES[::-1], start=(1 << 32) - 2)})
    assert judge(case, reference(case)) == []


def test_a_wrong_byte_and_a_guard_byte_written_are_reported():
    case = build_case({0: plan(COPIES, dst_skew=3)})
    out = reference(case)
    assert "dst0 differs" in judge(case, _damaged(out, "dst0", GUARD + 3 + 10, out.buffers["dst0"][GUARD + 13] ^ 1))[0]
    assert "dst0 differs" in judge(case, _damaged(out, "dst0", GUARD - 1, 0))[0]  # guard byte before the region


def test_a_completion_word_left_behind_names_the_queue():
    case = build_case({0: plan(COPIES), 1: plan(COPIES)})
    problems = judge(case, _word(reference(case), 1, 3))
    assert any(p.startswith("liveness: queue 1 stuck") for p in problems), problems


def test_after_disable_a_descriptor_above_the_count_must_not_touch_memory():
    case = build_case({0: plan(COPIES)}, control={"kind": "disable", "queue": 0, "after": 2})
    out = reference(case)
    assert judge(case, out) == []
    done = int.from_bytes(out.buffers["completions"][:8], "little")
    assert done < len(COPIES)
    last = case.queues[0]["descriptors"][-1]
    landed = _damaged(out, "dst0", GUARD + last["dst_offset"], 0x11)  # the last copy's first byte "landed"
    assert any("dst0 differs" in p for p in judge(case, landed))


def _landed(case, out, q: int, index: int, upto: int | None = None):
    """`out` with descriptor `index` of queue q copied (its first `upto` bytes), as an engine may have done it."""
    d = case.queues[q]["descriptors"][index]
    src = next(b for b in case.scenario.buffers if b.name == f"src{q}").initial()
    dst_base = next(s for s in case.scenario.steps if s["op"] == "region" and s["id"] == d["dst_region"])["offset"]
    src_base = next(s for s in case.scenario.steps if s["op"] == "region" and s["id"] == d["src_region"])["offset"]
    n = d["length"] if upto is None else upto
    b = bytearray(out.buffers[f"dst{q}"])
    b[dst_base + d["dst_offset"] : dst_base + d["dst_offset"] + n] = src[src_base + d["src_offset"] :][:n]
    return dataclasses.replace(out, buffers={**out.buffers, f"dst{q}": bytes(b)})


def test_after_reset_a_partly_landed_copy_passes_and_a_stray_byte_does_not():
    case = build_case({0: plan([("copy", 300, 0)] * 4, dst_skew=5)}, control={"kind": "reset", "after": 2})
    out = reference(case)
    assert judge(case, out) == []
    assert judge(case, _landed(case, out, 0, 3, upto=77)) == []  # a hard stop may leave a copy half done
    first = case.queues[0]["descriptors"][0]
    at = GUARD + 5 + first["dst_offset"] + 5
    stray = _damaged(out, "dst0", at, out.buffers["dst0"][at] ^ 0xFF ^ 0x5A)
    assert any("dst0 differs" in p for p in judge(case, stray))
    assert any("dst0 differs" in p for p in judge(case, _damaged(out, "dst0", GUARD + 4, 0)))  # outside the region
    counted = dataclasses.replace(out, descriptors=out.descriptors + 1)
    assert any("counters" in p for p in judge(case, counted))  # a reset clears the counters


def test_behind_a_bus_error_only_copies_without_fence_may_land():
    case = build_case({0: plan([("error", "BUS_ERROR_WRITE", 0), ("copy", 341, 0), ("copy", 64, 2)])})
    out = reference(case)
    assert out.queues[0]["error"] == "BUS_ERROR"
    assert judge(case, out) == []
    assert judge(case, _landed(case, out, 0, 1)) == []  # no FENCE: it may have started before the error returned
    assert judge(case, _landed(case, out, 0, 1, upto=100)) == []
    assert any("dst0 differs" in p for p in judge(case, _landed(case, out, 0, 2)))  # FENCE: it must not run
    d = case.queues[0]["descriptors"][1]
    at = GUARD + d["dst_offset"]
    wrong = _landed(case, out, 0, 1)
    wrong = _damaged(wrong, "dst0", at, wrong.buffers["dst0"][at] ^ 1)
    assert any("dst0 differs" in p for p in judge(case, wrong))  # landed, but not the byte its copy puts there
