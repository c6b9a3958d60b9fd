"""Parsing of the open flow's reports, on real tool output.

The files in data/ are nextpnr-ecp5 0.11.1's --report and yosys 0.70's `stat -json` for
tests/fpga/small_design.FifoSum(64, 512) on the LFE5UM5G-85F at 125 MHz, seed 1, with the
project's folder replaced by /project.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fpga.errors import ReportError
from fpga.flow.reports import parse_nextpnr_report, parse_yosys_stat, short_source

DATA = Path(__file__).parent / "data"
REPORT = DATA / "fifosum_nextpnr_report.json"
STAT = DATA / "fifosum_yosys_stat.json"


def test_nextpnr_report_clock_and_utilization():
    r = parse_nextpnr_report(REPORT, roots=(Path("/project"),))
    assert set(r.clocks) == {"clk"}
    assert r.clocks["clk"].fmax_mhz == pytest.approx(179.083, abs=1e-3)
    assert r.clocks["clk"].target_mhz == 125 and r.clocks["clk"].met
    assert (r.used("TRELLIS_COMB"), r.available("TRELLIS_COMB")) == (246, 83640)
    assert (r.used("TRELLIS_FF"), r.used("DP16KD"), r.available("DP16KD")) == (231, 2, 208)
    assert r.used("MULT18X18D") == 0 and r.used("NO_SUCH_BEL") == 0


def test_nextpnr_critical_path_summary():
    (cp,) = parse_nextpnr_report(REPORT, roots=(Path("/project"),)).critical_paths
    assert cp.clock == "clk"
    assert cp.start == "fifo.storage.0.0.DOA6" and cp.end == "sum_TRELLIS_FF_Q_45.DI"
    assert cp.delay_ns == pytest.approx(5.584, abs=1e-3)
    assert cp.delay_ns == pytest.approx(1000 / 179.083, abs=1e-3)
    assert cp.logic_ns + cp.routing_ns == pytest.approx(cp.delay_ns, abs=2e-3)
    # yosys' techmap files (/share/...) are left out; the design's own lines are made relative
    assert cp.sources == ("amaranth/lib/fifo.py:92", "tests/fpga/small_design.py:29")
    assert cp.cells_crossed > 30  # the 64-bit carry chain


def test_yosys_stat_cells():
    assert parse_yosys_stat(STAT) == {"CCU2C": 52, "DP16KD": 2, "LUT4": 120, "PFUMX": 2, "TRELLIS_FF": 231}


def test_short_source():
    assert short_source("/x/venv/lib/python3.11/site-packages/amaranth/lib/fifo.py:9", (Path("/x"),)) == \
        "amaranth/lib/fifo.py:9"
    assert short_source("/x/rtl/engine.py:3", (Path("/x"),)) == "rtl/engine.py:3"
    assert short_source("/elsewhere/a.py:1", (Path("/x"),)) == "/elsewhere/a.py:1"


def test_truncated_report_is_a_clear_error():
    with pytest.raises(ReportError, match="not JSON.*re-run"):
        parse_nextpnr_report(REPORT.read_text()[:1000])


def test_report_of_another_format_is_a_clear_error():
    data = json.loads(REPORT.read_text())
    del data["fmax"]
    with pytest.raises(ReportError, match="lacks an expected field.*'fmax'"):
        parse_nextpnr_report(data)
    with pytest.raises(ReportError, match="num_cells_by_type"):
        parse_yosys_stat({"modules": {}})
