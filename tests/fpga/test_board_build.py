"""The ECP5-5G EVN board top: its pins and PLL (always), and a whole bitstream build (slow)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth_boards.ecp5_5g_evn import ECP55GEVNPlatform
from rich.console import Console

from fpga.flow import board_build
from fpga.flow import pll
from fpga.flow import toolchain
from fpga.errors import FpgaFlowError, ToolMissing
from fpga.cores.evn_top import EvnTop
from fpga.cores.scratch_core import ScratchCore


def _tool_or_skip(name: str) -> None:
    try:
        toolchain.find(name)
    except ToolMissing as exc:
        pytest.skip(str(exc))


def test_pll_reaches_near_the_request():
    _tool_or_skip("ecppll")
    config = pll.configure(12.0, 125.0)
    assert abs(config.output_mhz - 125.0) <= 2.0
    assert "module arkdma_pll" in config.verilog and "EHXPLLL" in config.verilog
    with pytest.raises(FpgaFlowError, match="10-400 MHz"):
        pll.configure(12.0, 500.0)


def test_board_top_constrains_clock_uart_and_leds(tmp_path):
    _tool_or_skip("ecppll")
    config = pll.configure(12.0, 100.0)
    plan = ECP55GEVNPlatform().prepare(EvnTop(ScratchCore(config.output_mhz), config), "arkdma")
    plan.extract(str(tmp_path))
    lpf = (tmp_path / "arkdma.lpf").read_text()
    for site in ("A10", "G2", "P2", "P3", "A13", "A12"):  # clock, reset, UART rx/tx, LED 0 and 1
        assert f'SITE "{site}"' in lpf
    assert "FREQUENCY PORT" in lpf and "12000000" in lpf
    assert "arkdma_pll" in (tmp_path / "arkdma.ys").read_text()  # the PLL's Verilog is read


def test_unknown_board_is_refused(tmp_path):
    with pytest.raises(FpgaFlowError, match="known boards: ecp5-evn"):
        board_build.build(lambda mhz: None, "arty", tmp_path)
    with pytest.raises(FpgaFlowError, match="no bitstream"):
        board_build.flash(tmp_path / "missing.bit", "ecp5-evn")


@pytest.mark.slow
def test_scratch_core_bitstream(tmp_path):
    for tool in ("yosys", "nextpnr-ecp5", "ecppack", "ecppll"):
        _tool_or_skip(tool)
    result = board_build.build(lambda mhz: ScratchCore(mhz), "ecp5-evn", tmp_path, clock_mhz=100.0,
                               console=Console(file=io.StringIO()))
    bit = Path(result.bitstream)
    assert bit.stat().st_size > 500_000  # an LFE5UM5G-85F image is ~1.9 MB uncompressed
    assert result.meets_timing and result.fmax_mhz >= result.clock_mhz == 100.0
    assert result.io >= 12  # clock, reset, UART, 8 LEDs
    json.dumps(result.as_dict())


def test_the_board_build_places_and_routes_with_the_estimates_options():
    from fpga.flow.ooc_flow import PLACER_TIMING_WEIGHT, ROUTER_TIMING_OPTIONS

    opts = board_build.nextpnr_options(7, allow_timing_fail=False).split()
    assert opts[opts.index("--placer-heap-timingweight") + 1] == str(PLACER_TIMING_WEIGHT)
    assert ROUTER_TIMING_OPTIONS and all(o in opts for o in ROUTER_TIMING_OPTIONS)
    assert opts[opts.index("--seed") + 1] == "7" and "--timing-allow-fail" not in opts
    assert "--timing-allow-fail" in board_build.nextpnr_options(1, allow_timing_fail=True)


def test_flash_says_how_to_get_openfpgaloader(tmp_path):
    bit = tmp_path / "arkdma.bit"
    bit.write_bytes(b"\xff" * 16)
    try:
        toolchain.find("openFPGALoader")
        pytest.skip("openFPGALoader is installed here; this test checks the message when it is not")
    except ToolMissing:
        pass
    with pytest.raises(ToolMissing, match="apt install openfpgaloader"):
        board_build.flash(bit, "ecp5-evn")


def test_engine_ports_are_found_by_kind():
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    from fpga.cores.engine_core import EnginePortError, find_ports
    from rtl.axi import axi_lite_signature, axi_signature

    def Shape(members):  # only the signature is looked at
        return SimpleNamespace(signature=wiring.Signature(members))

    good = Shape({"regs": In(axi_lite_signature(12)), "win": In(axi_signature(12, 64, 4)),
                  "host": Out(axi_signature(64, 64, 6)), "irq": Out(1)})
    assert find_ports(good) == {"bar": "regs", "window": "win", "memory": "host"}
    two_masters = Shape({"regs": In(axi_lite_signature(12)), "win": In(axi_signature(12, 64, 4)),
                         "rd": Out(axi_signature(64, 64, 6)), "wr": Out(axi_signature(64, 64, 6))})
    with pytest.raises(EnginePortError, match="exactly one"):
        find_ports(two_masters)
