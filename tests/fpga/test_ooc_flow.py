"""The out-of-context ECP5 flow end to end on a small design (yosys + nextpnr-ecp5 from YoWASP)."""

from __future__ import annotations

import io
import json

import pytest
pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from rich.console import Console

from fpga.flow import estimate
from fpga.flow import toolchain
from fpga.errors import FpgaFlowError, ToolMissing
from tests.fpga.small_design import FifoSum


def _tools_or_skip() -> None:
    try:
        toolchain.find("yosys"), toolchain.find("nextpnr-ecp5")
    except ToolMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def small_report(tmp_path_factory):
    _tools_or_skip()
    workdir = tmp_path_factory.mktemp("fifosum")
    return estimate.estimate_design(FifoSum(64, 512), {"data_width": 64, "depth": 512}, workdir, name="FifoSum",
                                    target_mhz=100.0, seeds=(1, 2), console=Console(file=io.StringIO()))


def test_small_design_resources_follow_its_structure(small_report):
    r = small_report
    # 64-bit accumulator + FIFO pointers and output register: at least 64 + 2*9 flip-flops
    assert r.ffs >= 64 + 2 * 9
    # 512 x 64 bits = 32 Kbit: two 18 Kbit DP16KD at least
    assert 2 <= r.brams <= 4
    # the 64-bit adder is a carry chain: 32 CCU2C cells, each two LUT4 sites
    assert r.cells.get("CCU2C", 0) >= 32
    assert r.luts >= 64
    assert r.luts_available == 83640 and r.brams_available == 208  # the LFE5UM5G-85F
    assert r.part == "LFE5UM5G-85F-8BG381"


def test_small_design_timing(small_report):
    r = small_report
    assert set(r.fmax_by_seed_mhz) == {"1", "2"}
    assert r.fmax_mhz == min(r.fmax_by_seed_mhz.values())
    assert 50 < r.fmax_mhz < 500
    assert r.meets_target == (r.fmax_mhz >= 100.0)
    cp = r.critical_path
    assert cp is not None and cp["clock"] == "clk"
    assert cp["delay_ns"] == pytest.approx(cp["logic_ns"] + cp["routing_ns"])
    # 1000/fmax is the path delay; nextpnr rounds, so allow a little
    assert cp["delay_ns"] == pytest.approx(1000.0 / r.fmax_mhz, rel=0.02)
    # sources are shown relative to the project, never with this machine's folders
    assert any(s.startswith("tests/fpga/small_design.py:") or s.startswith("amaranth/") for s in cp["sources"])
    assert not any(s.startswith("/") for s in cp["sources"])


def test_small_design_report_is_complete_json(small_report, tmp_path):
    data = json.loads(small_report.to_json())
    for key in ("fmax_mhz", "luts", "ffs", "brams", "data_width", "params", "tools", "seconds"):
        assert key in data
    assert data["data_width"] == 64
    assert data["tools"]["yosys"].startswith("Yosys ")
    assert "nextpnr" in data["tools"]["nextpnr-ecp5"]
    assert data["seconds"]["total"] >= data["seconds"]["synthesize"] > 0


def test_classic_abc_mapping_gives_the_same_design(small_report, tmp_path):
    """The fallback used when abc9 crashes maps the same logic: same FFs and block RAMs, LUTs close."""
    from fpga.flow import ooc_flow

    result = ooc_flow.run(FifoSum(64, 512), tmp_path, target_mhz=100.0, lut_mapper=ooc_flow.LutMapper.ABC,
                          console=Console(file=io.StringIO()))
    (run,) = result.runs
    assert result.lut_mapper == "abc" and small_report.lut_mapper == "abc9"
    assert run.report.used("TRELLIS_FF") == small_report.ffs and run.report.used("DP16KD") == small_report.brams
    assert abs(run.report.used("TRELLIS_COMB") - small_report.luts) <= 0.3 * small_report.luts
    assert "abc -lut 4" in (tmp_path / "synth.ys").read_text()


def test_every_place_and_route_reroutes_failing_paths(tmp_path, monkeypatch):
    """nextpnr is run with the router's timing options (ROUTER_TIMING_OPTIONS) on every seed, as the JSON's
    `flow` says."""
    _tools_or_skip()
    from fpga.flow import ooc_flow

    real_find, calls = toolchain.find, []

    class Recording:
        def __init__(self, tool):
            self.tool = tool

        def run(self, args, *rest, **kw):
            calls.append(list(args))
            return self.tool.run(args, *rest, **kw)

        def __getattr__(self, name):
            return getattr(self.tool, name)

    monkeypatch.setattr(ooc_flow.toolchain, "find",
                        lambda name: Recording(real_find(name)) if name == "nextpnr-ecp5" else real_find(name))
    ooc_flow.run(FifoSum(16, 32), tmp_path, target_mhz=100.0, seeds=(1, 2), console=Console(file=io.StringIO()))
    assert len(calls) == 2 and ooc_flow.ROUTER_TIMING_OPTIONS == ("--tmg-ripup",)
    assert all("--tmg-ripup" in args for args in calls)
    assert "--tmg-ripup" in estimate.FLOW


def test_abc9_crash_is_recognized(tmp_path):
    from fpga.flow.ooc_flow import _abc9_crashed

    log = tmp_path / "yosys.log"
    log.write_text("4.14.5. Executing ABC9.\n"
                   "Running ABC command: \"/yosys-abc\" -s -f <abc-temp-dir>/abc.script 2>&1\n\n")
    assert _abc9_crashed(log)
    log.write_text("ERROR: Module `top' not found!\n")
    assert not _abc9_crashed(log)


def test_flow_rejects_bad_requests(tmp_path):
    from fpga.flow import ooc_flow

    with pytest.raises(FpgaFlowError, match="unknown ECP5 part"):
        ooc_flow.run(None, tmp_path, part="XC7A35T")
    with pytest.raises(FpgaFlowError, match="abc9 or abc"):
        ooc_flow.run(None, tmp_path, lut_mapper="vpr")
    with pytest.raises(FpgaFlowError, match="timing weight"):
        ooc_flow.run(None, tmp_path, placer_timing_weight=-1)


def test_tool_failure_names_the_log(tmp_path):
    _tools_or_skip()
    from fpga.errors import ToolFailed

    tool = toolchain.find("nextpnr-ecp5")
    with pytest.raises(ToolFailed, match="exited with status") as info:
        tool.run(["--um5g-85k", "--json", "missing.json"], tmp_path / "pnr.log", tmp_path, 120)
    assert info.value.log == tmp_path / "pnr.log" and info.value.log.exists()


def test_report_names_the_source_revision(small_report):
    assert small_report.source == "unknown" or len(small_report.source.removesuffix("+changes")) >= 7
