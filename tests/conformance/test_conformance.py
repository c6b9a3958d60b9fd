"""Every scenario on every engine present, compared with the reference engine byte for byte.

Test ids read `<engine>-<scenario>`. Engines that cannot run here are skipped with the reason;
an engine joins by having a provider in ark_runtime/engines.py.
"""

from __future__ import annotations

import pytest

from ark_runtime import engines
from driver.abi import Capability, COMPLETION_COUNT_MASK
from driver.player import play
from driver.reference_engine import ReferenceEngine
from driver.scenario import Outcome, Scenario
from tests.conformance.builder import COMPLETION_STRIDE
from tests.conformance.compare import assert_same, check_expectations
from tests.conformance.scenarios import all_scenarios

SCENARIOS = all_scenarios()
BY_NAME = {s.name: s for s in SCENARIOS}
ENGINE_MARKS = {"software-cuda": [pytest.mark.gpu], "rtl": [pytest.mark.sim], "card-uart-sim": [pytest.mark.sim],
                "card-sim": [pytest.mark.sim]}
# A board behind its UART bridge moves buffers at kilobytes a second (the simulated one at about 700 bytes a
# second): by default it plays a cheap cross-section (enable checks, error log, bus errors and zero lengths,
# an unaligned copy, IMM by bus address), the rest runs under `slow`.
BOARD_CI = {"rule_completion_location_codes", "rule_error_log_overflow", "rule_error_log_overflow_flag",
            "rule_zero_length_copies", "size_65", "regress_imm_unaligned_region_base"}
NEEDS = {"bus_errors": Capability.BUS_ERRORS}

_outcomes: dict[str, dict[str, Outcome]] = {}
_caps: dict[str, Capability] = {}


def reference(scenario: Scenario) -> Outcome:
    with ReferenceEngine(scenario.num_queues, scenario.slots, scenario.num_regions) as engine:
        return play(engine, scenario)


def _runnable(scenario: Scenario, caps: Capability) -> bool:
    return all(NEEDS[n] & caps for n in scenario.needs)


def outcome_on(engine: str, scenario: Scenario, selected: set[str]) -> Outcome:
    """Plays the `selected` scenarios on `engine` once per session (one batch: one simulator run for the RTL)."""
    prov = engines.provider(engine)
    reason = prov.unavailable_reason()
    if reason:
        pytest.skip(f"engine {engine} cannot run here: {reason}")
    if engine not in _outcomes:
        _caps[engine] = prov.capabilities()
        batch = [s for s in SCENARIOS if s.name in selected and _runnable(s, _caps[engine])
                 and prov.cannot_play(s) is None]
        _outcomes[engine] = prov.run_scenarios(batch)
    if not _runnable(scenario, _caps[engine]):
        pytest.skip(f"engine {engine} lacks {', '.join(scenario.needs)}")
    why = prov.cannot_play(scenario)
    if why:
        pytest.skip(f"engine {engine}: {why}")
    return _outcomes[engine][scenario.name]


def selected_on(request, engine: str) -> set[str]:
    """The scenarios this session runs on `engine` (so an engine that is slow to play them plays no more)."""
    return {item.callspec.params["name"] for item in request.session.items
            if getattr(item, "callspec", None) is not None and item.callspec.params.get("engine") == engine
            and "name" in item.callspec.params}


def reference_for(scenario: Scenario, out: Outcome) -> Outcome:
    """The reference outcome; for a prefix scenario, replayed as far as the engine got."""
    if not scenario.prefix:
        return reference(scenario)
    p = scenario.expect["prefix"]
    raw = out.buffers["completions"][p["slot"] * COMPLETION_STRIDE :][:8]
    done = (int.from_bytes(raw, "little") & COMPLETION_COUNT_MASK) - p["start"]
    return reference(scenario.with_advance(done))


# The card through its PCIe model passes every request and completion through the root complex model in
# Python: CI plays every scenario up to this many buffer bytes (49 of them, about a minute after the builds),
# the rest under `slow`.
CARD_SIM_CI_BYTES = 70_000


def _marks(engine: str, name: str) -> list:
    marks = list(ENGINE_MARKS.get(engine, []))
    if engine in ("card-uart", "card-uart-sim") and name not in BOARD_CI:
        marks.append(pytest.mark.slow)
    if engine == "card-sim" and sum(b.size for b in BY_NAME[name].buffers) > CARD_SIM_CI_BYTES:
        marks.append(pytest.mark.slow)
    return marks


CASES = [
    pytest.param(engine, name, id=f"{engine}-{name}", marks=_marks(engine, name))
    for engine in engines.known()
    for name in BY_NAME
]


@pytest.mark.parametrize(("engine", "name"), CASES)
def test_conformance(engine: str, name: str, request) -> None:
    scenario = BY_NAME[name]
    out = outcome_on(engine, scenario, selected_on(request, engine))
    check_expectations(scenario, out)
    assert_same(out, reference_for(scenario, out), scenario)
