"""Named regression scenarios: each failure the generated campaign (sim/fuzz/) found, as its minimal case.

Each entry says which engines it fails on today and why; tests/conformance/test_regressions.py plays every
one on every engine and marks those known failures xfail(strict=True), so the mark must go when the fix
lands (the engine-correctness fixes of issue 8)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from driver.abi import Flag
from sim.fuzz.cases import Case, build_case, plan

NOTIFY, FENCE = int(Flag.NOTIFY), int(Flag.FENCE)
DATA = Path(__file__).with_name("regressions")  # minimal cases a campaign wrote, kept as found


@dataclass(frozen=True)
class Regression:
    build: object  # () -> Case
    xfail: dict = field(default_factory=dict)  # engine -> reason it fails today (strict: it must fail)
    flaky: dict = field(default_factory=dict)  # engine -> reason it fails when the timing hits it (not strict)
    strict_reset_word: bool = False  # judge the completion word after a reset by the prefix rule


def imm_unaligned_bus_base() -> Case:
    """IMMs to a region whose bus base is 3 bytes past an 8-byte boundary (their offsets are 8-aligned), the
    first straddling a 64-byte bus word: each value must land whole."""
    return build_case({0: plan([("imm", 0x1122334455667788, NOTIFY), ("imm", 0x0102030405060708, 0)], sig_skew=3,
                               sig_base=56)},
                      bus_errors=False, name="imm_unaligned_bus_base")


def no_run_after_bus_error() -> Case:
    """A write that ends in BUS_ERROR (destination unbacked), then a copy without FENCE: the copy must not run."""
    return build_case({0: plan([("error", "BUS_ERROR_WRITE", 0), ("copy", 341, 0)])}, name="no_run_after_bus_error")


def reset_word_prefix() -> Case:
    """A global reset with descriptors in flight: the completion word must count exactly the descriptors
    that landed (the prefix rule), not stay behind them."""
    return build_case({0: plan([("copy", 4096, 0)] * 6)}, control={"kind": "reset", "after": 3},
                      bus_errors=False, name="reset_word_prefix")


def from_file(name: str):
    """A case kept as the campaign's shrinker left it (too entangled to say better by hand)."""
    return lambda: Case.from_json(json.loads((DATA / f"{name}.json").read_text()))


REGRESSIONS: dict[str, Regression] = {
    "imm_unaligned_bus_base": Regression(imm_unaligned_bus_base, {
        "rtl": "issue 8 defect 1: fixed on the engine-correctness branch"}),
    "no_run_after_bus_error": Regression(no_run_after_bus_error, {
        "rtl": "issue 8 defect 2: fixed on the engine-correctness branch"}),
    "reset_word_prefix": Regression(reset_word_prefix, {
        e: "issue 8 defect 5: fixed on the engine-correctness branch" for e in ("reference", "rtl")},
        {e: "issue 8 defect 5 (when the reset catches descriptors in flight): fixed on the engine-correctness branch"
         for e in ("software-host", "software-cuda")}, strict_reset_word=True),
    # Three queues, 1770 ns reads / 120 ns writes: queue 1's write ends in BUS_ERROR and its next copy runs
    # anyway (defect 2), and queue 0's halt (UNKNOWN_REGION) never reaches its completion word in memory
    # (the register has the error bit, memory does not). Gone with 120/40 ns; present with 8-aligned bases.
    "halt_word_lost_after_bus_error": Regression(from_file("halt_word_lost_after_bus_error"), {
        "rtl": "issue 8 defect 2, and a halt word lost in memory that matches none of the listed defects "
               "(found by the generated suite; reported with the engine-correctness fixes)"}),
    # Two queues, 120 ns reads / 8 ns writes, no pauses: queue 0 runs three NOTIFY copies while queue 1 runs
    # an IMM, a NOTIFY|FENCE copy and an IMM at a misaligned offset; queue 1 halts (MISALIGNED, register
    # 0x8000000000000002) but memory keeps 0x2. No bus error, no unaligned base: not one of the listed defects.
    "halt_word_lost_two_queues": Regression(from_file("halt_word_lost_two_queues"), {
        "rtl": "a halt word lost in memory, matching none of issue 8's listed defects (found by the generated "
               "suite; reported to the lead)"}),
}
