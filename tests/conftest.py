"""Session-wide rules: a run that passes no test fails; ARKDMA_REQUIRE_GPU=1 turns GPU skips into failures;
the summary groups skips by reason (one line per reason with a count) instead of one line per test site."""

from __future__ import annotations

import os
import re
from collections import Counter

import pytest

# Every test lowers its models afresh (a test that patches a pass must see it run); tests of the cache name a folder.
os.environ.setdefault("ARK_LOWER_CACHE", "0")

# Skips that stay skips on a GPU machine: they need hardware beyond one GPU, or a test double.
EXPECTED_ON_GPU = ("needs two GPUs", "only the driver test double", "lacks ")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With ARKDMA_REQUIRE_GPU=1 (the GPU machine's run) a gpu-marked test that skips fails instead."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("ARKDMA_REQUIRE_GPU") != "1" or not report.skipped or not item.get_closest_marker("gpu"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if any(text in reason for text in EXPECTED_ON_GPU):
        return
    report.outcome = "failed"
    report.longrepr = f"ARKDMA_REQUIRE_GPU=1 but this GPU test skipped: {reason}"


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0 or session.config.option.collectonly:
        return
    if not reporter.stats.get("passed"):
        reporter.write_line("arkdma: no test passed in this run; a run of zero tests is a failure", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _reason(report) -> str:
    text = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return re.sub(r"^Skipped: ", "", text).strip()


def pytest_terminal_summary(terminalreporter):
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons = Counter(_reason(r) for r in skipped)
    terminalreporter.section(f"{len(skipped)} skipped, by reason")
    for reason, count in reasons.most_common():
        terminalreporter.write_line(f"{count:5d}  {reason}")
