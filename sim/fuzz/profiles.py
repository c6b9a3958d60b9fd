"""Hypothesis settings profiles of the generated suite: "arkdma-ci" (fixed seeds, a bounded count, for
`./dev test`) and "arkdma-campaign" (fresh randomness, rounds of examples until a time budget is spent)."""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings

CI = "arkdma-ci"
CAMPAIGN = "arkdma-campaign"
CI_EXAMPLES = 60  # per in-process engine: ~1 s on the reference, ~2 s on software-host
RTL_CI_CASES = 24  # in one simulator run
CAMPAIGN_ROUND = 100  # examples per Hypothesis run of a campaign (the time budget is checked between runs)

# Generated cases are large data and some engines are slow: the time-based health checks say nothing here.
_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]

settings.register_profile(CI, max_examples=CI_EXAMPLES, derandomize=True, deadline=None, database=None,
                          print_blob=True, suppress_health_check=_QUIET)
settings.register_profile(CAMPAIGN, max_examples=CAMPAIGN_ROUND, derandomize=False, deadline=None, database=None,
                          print_blob=True, suppress_health_check=_QUIET)


def collect_settings(profile: str, count: int) -> settings:
    """Settings that only draw `count` cases (no shrinking): to gather a batch for one simulator run."""
    return settings(settings.get_profile(profile), max_examples=count, phases=[Phase.generate])
