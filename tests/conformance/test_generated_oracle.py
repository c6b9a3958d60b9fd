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


def test_after_reset_memory_must_match_a_prefix():
    case = build_case({0: plan([("copy", 300, 0)] * 4)}, control={"kind": "reset", "after": 2})
    out = reference(case)
    assert judge(case, out) == []
    first = case.queues[0]["descriptors"][0]
    half = _damaged(out, "dst0", GUARD + first["dst_offset"] + 5, out.buffers["dst0"][GUARD + 5] ^ 0xFF)
    assert any("matches no prefix" in p for p in judge(case, half))
    assert any("completion word says 1 done but 2" in p
               for p in judge(case, _word(out, 0, 1), strict_reset_word=True))
