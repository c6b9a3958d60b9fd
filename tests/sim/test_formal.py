"""Bounded model checks of the read path's credits (sim/formal/): they hold to a depth where the
16-row buffer has wrapped several times, and a planted over-allocation is found with a counterexample."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from rtl.params import EngineParams  # noqa: E402
from sim.formal.bmc import check  # noqa: E402
from sim.formal.read_credits import ReadCredits  # noqa: E402

pytestmark = [
    pytest.mark.sim,
    pytest.mark.skipif(not (Path(sys.executable).parent / "z3").exists() and shutil.which("z3") is None,
                       reason="z3 is not installed: pip install 'arkdma[hw]'"),
]


def _params(buffer_bytes: int) -> EngineParams:
    # 512-bit rows: 1 KiB is 16 rows, so a few 8-beat bursts fill the buffer and the pointers wrap
    return EngineParams(data_width=512, num_queues=2, slots=16, num_regions=8, reads_outstanding=4,
                        writes_outstanding=8, buffer_bytes=buffer_bytes, max_burst_beats=8)


def test_read_credits_hold(tmp_path):
    result = check(ReadCredits(_params(1024)), "read_credits", 6, tmp_path)
    assert result.proved, result.log[-2000:]


def test_an_engine_that_overallocates_is_caught(tmp_path):
    """A read engine built for a 2 KiB buffer, checked against the 1 KiB one it would sit beside."""
    result = check(ReadCredits(_params(1024), built=_params(2048)), "read_credits_bug", 6, tmp_path)
    assert not result.proved
    assert result.trace is not None and result.trace.stat().st_size > 0
    assert "more buffer rows handed out" in result.log or "Assert failed" in result.log, result.log[-2000:]


@pytest.mark.slow
def test_read_credits_hold_deeper(tmp_path):
    result = check(ReadCredits(_params(1024)), "read_credits", 10, tmp_path)
    assert result.proved, result.log[-2000:]
