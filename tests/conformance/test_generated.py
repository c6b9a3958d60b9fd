"""Generated scenarios (sim/fuzz/): a fixed seed set on every engine present, judged against the reference
engine byte for byte, by the prefix rule after a disable or reset, and by liveness; a long campaign under
`slow`. In-process engines run each case under Hypothesis (a failure shrinks to a minimal case); the RTL
engine plays the whole set in one simulator run."""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")

from hypothesis import given, settings  # noqa: E402

from ark_runtime import engines  # noqa: E402
from driver.abi import Capability  # noqa: E402
from driver.scenario import Outcome  # noqa: E402
from sim.fuzz import profiles  # noqa: E402
from sim.fuzz.campaign import Campaign  # noqa: E402
from sim.fuzz.cases import Case, cases  # noqa: E402
from sim.fuzz.oracle import judge  # noqa: E402

IN_PROCESS = [pytest.param("reference", id="reference"), pytest.param("software-host", id="software-host"),
              pytest.param("software-cuda", id="software-cuda", marks=pytest.mark.gpu)]
def _provider(name: str):
    prov = engines.provider(name)
    reason = prov.unavailable_reason()
    if reason:
        pytest.skip(f"engine {name} cannot run here: {reason}")
    return prov


def _check_in_process(prov, bus_errors: bool) -> None:
    @settings(settings.get_profile(profiles.CI))
    @given(cases(bus_errors=bus_errors))
    def prop(case: Case) -> None:
        problems = judge(case, prov.run_scenarios([case.scenario])["generated"])
        assert not problems, "\n".join(problems)

    prop()


@pytest.mark.parametrize("engine", IN_PROCESS)
def test_generated_fixed_set(engine: str) -> None:
    prov = _provider(engine)
    _check_in_process(prov, bool(prov.capabilities() & Capability.BUS_ERRORS))


def draw_fixed_set(count: int, safe: bool) -> list[Case]:
    drawn: list[Case] = []

    @settings(profiles.collect_settings(profiles.CI, count))
    @given(cases(safe=safe))
    def collect(case: Case) -> None:
        drawn.append(case)

    collect()
    return drawn


def test_fixed_set_is_fixed_and_covers_the_mix() -> None:
    """The CI set is the same on every run and holds every control event, queue counts and error classes."""
    a, b = draw_fixed_set(profiles.CI_EXAMPLES, safe=False), draw_fixed_set(profiles.CI_EXAMPLES, safe=False)
    assert [c.to_json() for c in a] == [c.to_json() for c in b]
    assert {c.control["kind"] for c in a} == {"none", "disable", "reset"}
    assert {len(c.queues) for c in a} >= {1, 2, 3}
    flags = {d["flags"] for c in a for q in c.queues.values() for d in q["descriptors"]}
    assert {1, 2, 4} <= {f & m for f in flags for m in (1, 2, 4)}


@pytest.mark.sim
@pytest.mark.parametrize("data_width", [64, 512])
def test_generated_fixed_set_rtl(data_width: int) -> None:
    _provider("rtl")
    from sim.fuzz.rtl_runner import run_cases_rtl

    drawn = draw_fixed_set(profiles.RTL_CI_CASES, safe=False)
    failures = []
    for i, (case, out) in enumerate(zip(drawn, run_cases_rtl(drawn, data_width=data_width))):
        problems = judge(case, out) if isinstance(out, Outcome) else [str(out or "not run")]
        if problems:
            failures.append(f"case {i} ({case.descriptors} descriptors, {case.control}): " + "; ".join(problems))
    assert not failures, "\n".join(failures)


@pytest.mark.slow
@pytest.mark.sim
def test_generated_campaign_rtl(tmp_path) -> None:
    """Ten minutes of fresh generated cases on the 512-bit RTL, 40 to a simulator run, failures shrunk."""
    _provider("rtl")
    from sim.fuzz.rtl_runner import run_cases_rtl

    campaign = Campaign("rtl", None, tmp_path, safe=False, run_batch=run_cases_rtl)
    tally = campaign.run(600)
    assert tally.cases > 0
    assert not tally.findings, "\n".join(f"{f.problems[0]} (reproducer {f.file})" for f in tally.findings)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["reference", "software-host"])
def test_generated_campaign(engine: str, tmp_path) -> None:
    """Two minutes of fresh generated cases (arkdma sim fuzz does the same for as long as asked)."""
    prov = _provider(engine)
    campaign = Campaign(engine, lambda case: prov.run_scenarios([case.scenario])["generated"], tmp_path,
                        bus_errors=bool(prov.capabilities() & Capability.BUS_ERRORS))
    tally = campaign.run(120)
    assert tally.cases > 0
    assert not tally.findings, "\n".join(f"{f.problems[0]} (reproducer {f.file})" for f in tally.findings)
