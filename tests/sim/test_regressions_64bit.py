"""The named regression and rule scenarios on the 64-bit engine as well (the conformance suite's build is
512-bit; lane and realignment defects differ by width), compared byte for byte with the reference."""

from __future__ import annotations

import pytest

from tests.conformance.compare import assert_same, check_expectations
from tests.conformance.regressions import regression_scenarios
from tests.conformance.rules import rule_scenarios
from tests.conformance.test_conformance import reference_for

pytestmark = pytest.mark.sim
SCENARIOS = {s.name: s for s in regression_scenarios() + rule_scenarios()}
_outcomes: dict = {}


def outcomes() -> dict:
    if not _outcomes:
        from sim.provider import RtlProvider
        from sim.toolchain import missing

        reason = missing()
        if reason:
            pytest.skip(f"cannot simulate here: {reason}")
        _outcomes.update(RtlProvider().run_scenarios(list(SCENARIOS.values()), data_width=64))
    return _outcomes


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_on_the_64_bit_engine(name):
    scenario = SCENARIOS[name]
    out = outcomes()[name]
    check_expectations(scenario, out)
    assert_same(out, reference_for(scenario, out), scenario)
