"""Cases the generated campaign (sim/fuzz/) found or that pin one of issue 8's defects, as minimal generated
cases judged by the generated suite's oracle. tests/conformance/test_found_cases.py plays every one on every
engine; an entry's `xfail` names an engine that fails it today (strict: the mark must go with the fix).

tests/conformance/regressions.py holds the hand-written regression scenarios of the conformance suite."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from driver.abi import Flag
from sim.fuzz.cases import Case, build_case, plan

NOTIFY, FENCE = int(Flag.NOTIFY), int(Flag.FENCE)
DATA = Path(__file__).with_name("found")  # minimal cases a campaign wrote, kept as found


@dataclass(frozen=True)
class Regression:
    build: object  # () -> Case
    xfail: dict = field(default_factory=dict)  # engine -> reason it fails today (strict: it must fail)
    flaky: dict = field(default_factory=dict)  # engine -> reason it fails when the timing hits it (not strict)


def imm_unaligned_bus_base() -> Case:
    """IMMs to a region whose bus base is 3 bytes past an 8-byte boundary (their offsets are 8-aligned), the
    first straddling a 64-byte bus word. The alignment rule is by bus address, so the first halts the queue
    with MISALIGNED on every engine (the RTL once wrote it half)."""
    return build_case({0: plan([("imm", 0x1122334455667788, NOTIFY), ("imm", 0x0102030405060708, 0)], sig_skew=3,
                               sig_base=56)},
                      bus_errors=False, name="imm_unaligned_bus_base")


def runs_behind_bus_error() -> Case:
    """A write that ends in BUS_ERROR (destination unbacked), then a copy without FENCE (it may run: its bytes
    are untouched or its copy's, it never counts) and one with FENCE (it must not run)."""
    return build_case({0: plan([("error", "BUS_ERROR_WRITE", 0), ("copy", 341, 0), ("copy", 64, FENCE)])},
                      name="runs_behind_bus_error")


def reset_in_flight() -> Case:
    """A global reset with descriptors in flight: a hard stop in bounded time, every byte untouched or landed,
    counters, queues and error log cleared."""
    return build_case({0: plan([("copy", 4096, 0)] * 6)}, control={"kind": "reset", "after": 3},
                      bus_errors=False, name="reset_in_flight")


def from_file(name: str):
    """A case kept as the campaign's shrinker left it (too entangled to say better by hand)."""
    return lambda: Case.from_json(json.loads((DATA / f"{name}.json").read_text()))


FOUND: dict[str, Regression] = {
    "imm_unaligned_bus_base": Regression(imm_unaligned_bus_base),  # issue 8 defect 1: now MISALIGNED everywhere
    "runs_behind_bus_error": Regression(runs_behind_bus_error),  # issue 8 defect 2: the rule now allows it
    "reset_in_flight": Regression(reset_in_flight),  # issue 8 defects 3 and 5: reset is a hard stop
    # Three queues, 1770 ns reads / 120 ns writes: queue 1's write ends in BUS_ERROR and its next copy runs,
    # and queue 0's halt (UNKNOWN_REGION) never reached its completion word in memory: the RTL completion
    # writer's take cleared the wrong queue's dirty bit (fixed).
    "halt_word_lost_after_bus_error": Regression(from_file("halt_word_lost_after_bus_error")),
    # Two queues, 120 ns reads / 8 ns writes: queue 1 halts (MISALIGNED) while queue 0 runs NOTIFY copies;
    # the halt word stayed in the register and never reached memory (the same completion writer defect).
    "halt_word_lost_two_queues": Regression(from_file("halt_word_lost_two_queues")),
}
