"""Scenarios for the rules of docs/abi-rules.md that the other scenarios leave implicit (each was a gap a
reader of the docs found): every engine plays them and must match the reference byte for byte."""

from __future__ import annotations

import itertools

from driver.abi import COMPLETION_COUNT_MASK, Perm
from driver.scenario import Scenario
from tests.conformance.builder import Builder, desc

KiB = 1024
ERRLOG_DEPTH = 16  # every engine's default


def bad_completion_location_codes() -> Scenario:
    """Enabling a queue whose completion word has no valid home halts it at once with the code of the
    first failing check (UNKNOWN_REGION, PERMISSION, MISALIGNED, OUT_OF_BOUNDS), ERROR_INDEX = START,
    ERROR_COOKIE = 0, and writes nothing."""
    b = Builder("rule_completion_location_codes")
    b.buffer("ro", 256)
    b.buffer("wo", 256, "byte", 0x77)
    b.region(2, "ro", perms=Perm.READ)
    b.region(3, "wo", perms=Perm.WRITE)
    cases = [(0, 9, 0, "UNKNOWN_REGION"), (1, 2, 0, "PERMISSION"), (2, 3, 12, "MISALIGNED"),
             (3, 3, 256, "OUT_OF_BOUNDS")]
    for q, region, offset, code in cases:
        b.configure(q, region, offset, start=40 + q)
        b.enable(q)
        b.expect_queue(q, completed=40 + q, error=code, cookie=0, index=40 + q, in_memory=False)
    b.expect_untouched("wo", 0, 256)
    b.expect_untouched("ro", 0, 256)
    return b.build()


def doorbell_error_cookie_is_zero() -> Scenario:
    """A doorbell error has no descriptor: ERROR_COOKIE is 0 and ERROR_INDEX the doorbell value written."""
    b = Builder("rule_doorbell_error_cookie")
    b.buffer("src", 4 * KiB)
    b.buffer("dst", 4 * KiB, "byte", 0xA5)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.queue(0, start=1000)
    d = desc(0, 0, 1, 0, 256, cookie=0x1234)
    b.post(0, [d])
    b.wait_idle()
    b.ring(0, 990)  # backwards
    b.expect_copy(d)
    b.expect_queue(0, completed=1001, error="DOORBELL_BACKWARDS", cookie=0, index=990)
    return b.build()


def count_wraps_at_2_63() -> Scenario:
    """The count in the completion word is the completed count modulo 2**63 (bit 63 is the error flag):
    started just below 2**63 it wraps to small numbers; producers compare counts modulo 2**63."""
    start = COMPLETION_COUNT_MASK - 1  # 2**63 - 2
    b = Builder("rule_count_wraps_at_2_63")
    b.buffer("src", 4 * KiB)
    b.buffer("dst", 8 * KiB, "byte", 0xA5)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.queue(0, start=start)
    descs = [desc(0, 0, 1, 1024 * i, 512, cookie=i) for i in range(5)]
    b.post(0, descs)
    for d in descs:
        b.expect_copy(d)
    b.expect_queue(0, completed=(start + 5) & COMPLETION_COUNT_MASK)
    return b.build()


def zero_length_copies() -> Scenario:
    """A zero-length copy moves nothing and is checked like any other: at the same offset of one region it
    is no OVERLAP, from or to memory nothing backs it is no BUS_ERROR, past a region's end it is
    OUT_OF_BOUNDS."""
    b = Builder("rule_zero_length_copies", needs=("bus_errors",))
    b.buffer("buf", 4 * KiB, "byte", 0x42)
    b.region(1, "buf")
    b.hole(5, 4 * KiB)
    b.queue(0)
    b.queue(1)
    b.post(0, [desc(1, 100, 1, 100, 0, cookie=1), desc(5, 0, 1, 0, 0, cookie=2), desc(1, 0, 5, 64, 0, cookie=3)])
    b.post(1, [desc(1, 4 * KiB + 1, 1, 0, 0, cookie=4)])
    b.expect_untouched("buf", 0, 4 * KiB)
    b.expect_queue(0, completed=3)
    b.expect_queue(1, completed=0, error="OUT_OF_BOUNDS", cookie=4, index=0)
    return b.build()


def error_log_keeps_the_oldest() -> Scenario:
    """The error log holds ERRLOG_DEPTH entries; when it is full, new entries are dropped (and the overflow
    flag set), so the oldest errors, usually the cause, survive until the log is read."""
    b = Builder("rule_error_log_overflow")
    b.buffer("dst", 4 * KiB, "byte", 0xA5)
    b.region(1, "dst")
    b.queue(0)
    for i in range(ERRLOG_DEPTH + 4):
        if i:
            b.disable(0)
            b.enable(0)
        b.post(0, [desc(9, 0, 1, 0, 64, cookie=0x100 + i)])  # region 9 is not registered
        b.wait_idle()
    b.expect_untouched("dst", 0, 4 * KiB)
    b.expect_queue(0, completed=0, error="UNKNOWN_REGION", cookie=0x100 + ERRLOG_DEPTH + 3, index=0)
    return b.build()


def error_log_overflow_flag() -> Scenario:
    """STATUS.ERRLOG_OVERFLOW says an error was dropped because the log was full, and stays set until the host
    writes 1 to it (or resets the engine): reading the log leaves it set, writing 1 clears it without touching
    the log, errors that find room leave it clear, and the next drop sets it again.

    Each error is an enable whose completion word has no home (region 9 is not registered): the queue halts at
    once with UNKNOWN_REGION and ERROR_INDEX = START, a different START each time, so entries tell apart."""
    b = Builder("rule_error_log_overflow_flag")
    starts = itertools.count(1)

    def errors(n: int) -> None:
        for _ in range(n):
            b.disable(0)
            b.configure(0, 9, 0, start=next(starts))
            b.enable(0)

    errors(ERRLOG_DEPTH + 1)
    b.observe_errlog(f"{ERRLOG_DEPTH + 1} errors, log not read", overflow=True)
    b.read_errlog("first read of the log", entries=ERRLOG_DEPTH, overflow=True)
    b.read_errlog("second read, the log empty", entries=0, overflow=True)
    b.clear_errlog_overflow()
    b.observe_errlog("after writing 1", overflow=False)
    errors(3)
    b.observe_errlog("3 new errors, log far from full", overflow=False)
    b.read_errlog("the 3 new errors", entries=3, overflow=False)
    errors(ERRLOG_DEPTH + 1)
    b.observe_errlog("second overflow", overflow=True)
    b.clear_errlog_overflow()
    b.observe_errlog("written 1 with the log still full", overflow=False)
    errors(1)
    b.observe_errlog("a drop after the clear", overflow=True)
    b.read_errlog("the second log", entries=ERRLOG_DEPTH, overflow=True)
    b.reset()
    b.observe_errlog("after a reset", overflow=False)
    b.expect_queue(0, completed=0, enabled=False, in_memory=False)
    return b.build()


def disable_then_reset_keeps_the_prefix() -> Scenario:
    """A global reset is a hard stop (it writes no completion word and makes no promise about descriptors
    in flight); disabling every queue first gives the prefix rule, and what reset leaves is then exact."""
    b = Builder("rule_disable_then_reset", prefix=True)
    b.buffer("src", 64 * KiB)
    b.buffer("dst", 256 * KiB, "byte", 0xA5)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.queue(0, start=5)
    b.write(0, 5, [desc(0, 0, 1, 16 * KiB * i, 16 * KiB, cookie=i) for i in range(14)])
    b.ring(0, 19)
    b.advance(6)
    b.disable(0)
    b.reset()
    b.expect["prefix"] = {"slot": 0, "start": 5}
    return b.build()


def rule_scenarios() -> list[Scenario]:
    return [bad_completion_location_codes(), doorbell_error_cookie_is_zero(), count_wraps_at_2_63(),
            zero_length_copies(), error_log_keeps_the_oldest(), error_log_overflow_flag(),
            disable_then_reset_keeps_the_prefix()]

