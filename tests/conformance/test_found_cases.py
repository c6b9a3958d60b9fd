"""Every case the generated campaign found (tests/conformance/found_cases.py) on every engine present, judged
by the generated suite's oracle."""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")

from ark_runtime import engines  # noqa: E402
from driver.abi import Capability  # noqa: E402
from driver.scenario import Outcome  # noqa: E402
from sim.fuzz.oracle import judge  # noqa: E402
from tests.conformance.found_cases import FOUND  # noqa: E402

ENGINE_MARKS = {"software-cuda": [pytest.mark.gpu], "rtl": [pytest.mark.sim]}
ENGINES = ("reference", "software-host", "software-cuda", "rtl")
_rtl_outcomes: dict[str, object] = {}


def _needs_bus_errors(case) -> bool:
    return any(s["op"] == "region_hole" for s in case.scenario.steps)


def _outcome(engine: str, name: str):
    prov = engines.provider(engine)
    reason = prov.unavailable_reason()
    if reason:
        pytest.skip(f"engine {engine} cannot run here: {reason}")
    case = FOUND[name].build()
    if _needs_bus_errors(case) and not prov.capabilities() & Capability.BUS_ERRORS:
        pytest.skip(f"engine {engine} lacks bus_errors")
    if engine != "rtl":
        return case, prov.run_scenarios([case.scenario])[case.scenario.name]
    if not _rtl_outcomes:  # every regression in one simulator run
        from sim.fuzz.rtl_runner import run_cases_rtl

        names = list(FOUND)
        _rtl_outcomes.update(zip(names, run_cases_rtl([FOUND[n].build() for n in names])))
    return case, _rtl_outcomes[name]


def _marks(engine: str, reg) -> list:
    marks = list(ENGINE_MARKS.get(engine, []))
    if engine in reg.xfail:
        marks.append(pytest.mark.xfail(strict=True, reason=reg.xfail[engine]))
    elif engine in reg.flaky:
        marks.append(pytest.mark.xfail(strict=False, reason=reg.flaky[engine]))
    return marks


CASES = [pytest.param(engine, name, id=f"{engine}-{name}", marks=_marks(engine, reg))
         for name, reg in FOUND.items() for engine in ENGINES]


@pytest.mark.parametrize(("engine", "name"), CASES)
def test_found_case(engine: str, name: str) -> None:
    case, out = _outcome(engine, name)
    problems = judge(case, out) if isinstance(out, Outcome) else [str(out)]
    assert not problems, "\n".join(problems)
