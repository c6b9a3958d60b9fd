"""The Vivado flow of the PCIe card (alveo-u250) without Vivado: the project it writes and the checks that stand in
for Vivado, each check shown to fail on a broken project; Vivado's run and the hardware manager through a stand-in
`vivado` that follows the script's steps; the refusals (unknown board, bad clock, no Vivado)."""

from __future__ import annotations

import io
import json
import re
import stat
from pathlib import Path

import pytest

pytest.importorskip("amaranth")

from rich.console import Console  # noqa: E402

from arkdma_cli.main import build_parser, main  # noqa: E402
from driver.discovery import ARKDMA_PCI_IDS  # noqa: E402
from fpga.boards import BOARDS, board  # noqa: E402
from fpga.boards.alveo_u250 import ALVEO_U250  # noqa: E402
from fpga.cores.pcie4_ip import IP_MODULE  # noqa: E402
from fpga.cores.pcie_card_top import bar0_bytes, top_ports  # noqa: E402
from fpga.errors import FpgaFlowError, ToolFailed, ToolMissing  # noqa: E402
from fpga.flow import vivado  # noqa: E402
from fpga.flow.vivado_checks import (ProjectCheckFailed, check_ports_constrained, check_tcl_balanced,  # noqa: E402
                                     check_tcl_inputs, synthesize, verilog_ports)
from fpga.flow.vivado_ip import IpConfigError, check_ip_config, ip_config  # noqa: E402
from fpga.flow.vivado_project import BUILD_STEPS, xdc  # noqa: E402
from rtl.params import EngineParams  # noqa: E402

# the smallest engine: a quick elaboration and synthesis
SMALL = EngineParams(data_width=64, num_queues=1, slots=2, num_regions=1, reads_outstanding=2, writes_outstanding=4,
                     buffer_bytes=1024, max_burst_beats=4, errlog_depth=1)
QUIET = Console(file=io.StringIO())


SMALL_OPTIONS = ["--num-queues", "1", "--slots", "2", "--num-regions", "1", "--reads-outstanding", "2",
                 "--writes-outstanding", "4", "--buffer-bytes", "1024", "--max-burst-beats", "4", "--errlog-depth", "1"]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """`arkdma fpga build --board alveo-u250` where there is no Vivado: (folder, what it printed, its JSON)."""
    folder, empty = tmp_path_factory.mktemp("u250"), tmp_path_factory.mktemp("empty_path")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(vivado.VIVADO_ENV, raising=False)
        mp.setenv("PATH", str(empty))
        args = build_parser().parse_args(["fpga", "build", "--board", "alveo-u250", "--build-dir", str(folder),
                                          "--json", str(folder / "result.json"), *SMALL_OPTIONS])
        out = io.StringIO()
        assert args.func(args, console=Console(file=out, width=400)) == 0
    return folder, out.getvalue(), json.loads((folder / "result.json").read_text())


@pytest.fixture
def no_vivado(monkeypatch, tmp_path_factory):
    """No vivado on PATH and no $VIVADO (the project's own tools are still found beside the Python)."""
    monkeypatch.delenv(vivado.VIVADO_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path_factory.mktemp("empty_path")))


def _fake_vivado(folder: Path, *, fail: bool = False) -> Path:
    """A `vivado` that prints the ARKDMA-STEP lines of the script it is given and writes the products."""
    script = folder / "vivado"
    body = ('echo "ERROR: [Common 17-69] Command failed: the stand-in fails"; exit 1\n' if fail else
            'for a; do last="$a"; done\ngrep -o "ARKDMA-STEP [a-z]*" "$last"\ntouch arkdma.bit arkdma.mcs\n')
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


# --- the project written, and checked without Vivado -------------------------------------------------------------

def test_without_vivado_the_build_writes_a_project_that_passes_every_check(project):
    folder, printed, result = project
    assert result["vivado"] is None and result["bitstream"] is None
    assert "no bitstream: Vivado was not found on PATH" in printed
    assert "checked: 10 top-level ports" in printed and "checked: yosys synthesized arkdma_card_top" in printed
    for name in ("arkdma_card_top.v", "arkdma_card_top.xdc", "build.tcl", "blackboxes.v", "yosys.log"):
        assert (folder / name).is_file(), name
    assert any("each placed on its own pin" in c for c in result["checks"])
    cells = (folder / "yosys_stat.txt").read_text()
    for cell in (IP_MODULE, "IBUFDS_GTE4", "IBUFDS", "BUFG"):
        assert re.search(rf"\b1\s+{cell}\b", cells), cell


def test_project_configures_the_ip_for_the_front_end_and_the_driver(project):
    folder = project[0]
    tcl = (folder / "build.tcl").read_text()
    vendor, device = next(ids for ids in ARKDMA_PCI_IDS if ids[0] == 0x10EE)
    for expected in ("create_project -force arkdma", "-part xcu250-figd2104-2L-e", "create_ip -name pcie4_uscale_plus",
                     "CONFIG.PL_LINK_CAP_MAX_LINK_SPEED {8.0_GT/s}", "CONFIG.PL_LINK_CAP_MAX_LINK_WIDTH {X8}",
                     "CONFIG.axisten_if_width {256_bit}", "CONFIG.axisten_freq {250}",
                     "CONFIG.AXISTEN_IF_RC_STRADDLE {false}", "CONFIG.extended_tag_field {true}",
                     f"CONFIG.vendor_id {{{vendor:04X}}}", f"CONFIG.PF0_DEVICE_ID {{{device:04X}}}",
                     "CONFIG.pf0_bar0_64bit {true}", "CONFIG.AXISTEN_IF_CQ_ALIGNMENT_MODE {DWORD_Aligned}",
                     "launch_runs synth_1", "launch_runs impl_1", "write_bitstream", "write_cfgmem"):
        assert expected in tcl, expected
    scale, size = re.search(r"pf0_bar0_scale \{(\w+)\}.*?pf0_bar0_size \{(\d+)\}", tcl, re.S).groups()
    assert int(size) * {"Kilobytes": 1024, "Megabytes": 1 << 20}[scale] == bar0_bytes(SMALL)
    assert [m for m in re.findall(r'puts "ARKDMA-STEP (\w+)"', tcl)] == list(BUILD_STEPS)


def test_xdc_places_the_board_facts(project):
    folder = project[0]
    text = (folder / "arkdma_card_top.xdc").read_text()
    assert "set_property -dict {PACKAGE_PIN AM11} [get_ports pcie_refclk_p]" in text
    assert re.search(r"PACKAGE_PIN BD21 IOSTANDARD LVCMOS12.*\[get_ports pcie_perst_n\]", text)
    assert "set_property -dict {PACKAGE_PIN AF2} [get_ports {pcie_rx_p[0]}]" in text
    assert "set_property -dict {PACKAGE_PIN AN9} [get_ports {pcie_tx_p[7]}]" in text
    assert "create_clock -period 10.000 -name pcie_refclk_p [get_ports pcie_refclk_p]" in text
    assert "create_clock -period 3.333 -name sysclk_p [get_ports sysclk_p]" in text


# --- each check fails on a broken project -------------------------------------------------------------------------

def test_port_check_fails_on_a_missing_extra_or_shared_pin(project):
    folder = project[0]
    ports = verilog_ports((folder / "arkdma_card_top.v").read_text(), "arkdma_card_top")
    good = (folder / "arkdma_card_top.xdc").read_text()
    lane5 = "set_property -dict {PACKAGE_PIN AL9} [get_ports {pcie_tx_p[5]}]"
    with pytest.raises(ProjectCheckFailed, match=r"pcie_tx_p\[5\] has no PACKAGE_PIN"):
        check_ports_constrained(ports, good.replace(lane5, ""))
    with pytest.raises(ProjectCheckFailed, match="uart_txd, which is not a port"):
        check_ports_constrained(ports, good + "\nset_property -dict {PACKAGE_PIN BF18} [get_ports uart_txd]\n")
    with pytest.raises(ProjectCheckFailed, match="pin AL9 is given to both"):
        check_ports_constrained(ports, good.replace("PACKAGE_PIN AL4}", "PACKAGE_PIN AL9}"))
    with pytest.raises(ProjectCheckFailed, match=r"led\[3\].*3 bits wide"):
        check_ports_constrained(ports, good + "\nset_property -dict {PACKAGE_PIN AL20} [get_ports {led[3]}]\n")
    with pytest.raises(ProjectCheckFailed, match="clock on clk_user"):
        check_ports_constrained(ports, good + "\ncreate_clock -period 6.400 -name u [get_ports clk_user]\n")
    with pytest.raises(ProjectCheckFailed, match="no module nothere"):
        verilog_ports("module x(a);\n  input a;\nendmodule\n", "nothere")


def test_tcl_checks_fail_on_unbalanced_text_and_unwritten_inputs(project, tmp_path):
    folder = project[0]
    tcl = (folder / "build.tcl").read_text()
    check_tcl_balanced(tcl)
    with pytest.raises(ProjectCheckFailed, match="'{' opened on line"):
        check_tcl_balanced(tcl + "\nforeach x {a b {\n")
    with pytest.raises(ProjectCheckFailed, match=r"'\]' closes nothing"):
        check_tcl_balanced("set a b]\n")
    with pytest.raises(ProjectCheckFailed, match="'\"' opened on line 2"):
        check_tcl_balanced('set a 1\nputs "unclosed\n')
    check_tcl_balanced('# a comment with an unmatched ] and " is no command\nset a {x [y}\nputs "a \\" b"\n')
    assert check_tcl_inputs(tcl, folder) == ["arkdma_card_top.v", "arkdma_card_top.xdc"]
    with pytest.raises(ProjectCheckFailed, match="reads arkdma_card_top.v, which was not written"):
        check_tcl_inputs(tcl, tmp_path)
    with pytest.raises(ProjectCheckFailed, match="outside the build folder"):
        check_tcl_inputs("add_files /somewhere/else.v\n", folder)


def test_generic_synthesis_fails_on_an_instance_port_the_ip_lacks(tmp_path):
    (tmp_path / "bb.v").write_text(f"(* blackbox *)\nmodule {IP_MODULE}(user_clk);\n  output user_clk;\nendmodule\n")
    (tmp_path / "top.v").write_text(f"module t(o);\n  output o;\n  {IP_MODULE} ip(.user_clk(o), .no_such_port(o));\n"
                                    "endmodule\n")
    with pytest.raises(ToolFailed, match="no_such_port"):
        synthesize(tmp_path, ["bb.v", "top.v"], "t", tmp_path / "yosys.log")


@pytest.mark.parametrize("change, error", [
    ({"CONFIG_NOT_A_KEY": "1"}, "not a key this flow knows"),
    ({"PL_LINK_CAP_MAX_LINK_WIDTH": "X3"}, "out of range"),
    ({"pf0_bar0_size": "100"}, "out of range: a power of two"),
    ({"axisten_if_width": "512_bit"}, "built for 256-bit streams"),
    ({"PL_LINK_CAP_MAX_LINK_WIDTH": "X16"}, "wires 8 lanes"),
    ({"axisten_freq": "125"}, "carries 32 Gb/s, less than the link's 63.0"),
    ({"PF0_DEVICE_ID": "1234"}, "not ones the driver looks for"),
    ({"pf0_bar0_size": "8"}, f"BAR0 is 8192 bytes in the IP but .* need {bar0_bytes(SMALL)} bytes"),
    ({"pf0_bar0_64bit": "false"}, "64-bit BAR"),
    ({"AXISTEN_IF_RC_STRADDLE": "true"}, "one TLP per beat"),
    ({"AXISTEN_IF_RQ_ALIGNMENT_MODE": "Address_Aligned"}, "DWORD_Aligned"),
])
def test_ip_config_check_refuses(change, error):
    config = {**ip_config(SMALL, ALVEO_U250), **change}
    with pytest.raises(IpConfigError, match=error):
        check_ip_config(config, SMALL, ALVEO_U250)


def test_ip_config_follows_the_engine_and_the_board():
    big = EngineParams(data_width=64)
    config = ip_config(big, ALVEO_U250)
    assert (config["pf0_bar0_scale"], config["pf0_bar0_size"]) == ("Kilobytes", str(bar0_bytes(big) // 1024))
    assert config["pcie_blk_locn"] == ALVEO_U250.pcie_block and config["select_quad"] == ALVEO_U250.pcie_quad
    assert len(check_ip_config(config, big, ALVEO_U250)) == 3


# --- the board description ----------------------------------------------------------------------------------------

def test_board_pins_are_distinct_and_unverified_facts_have_sources():
    spec = board("alveo-u250")
    assert spec.part == "xcu250-figd2104-2L-e" and spec.pcie_lanes == 8
    sites = [pin.site for port in spec.ports for pin in port.pins]
    assert len(sites) == len(set(sites)) == 40
    assert all(f.source and f.value for f in spec.unverified)
    assert "pcie_blk_locn" in " ".join(f.fact for f in spec.unverified)
    with pytest.raises(FpgaFlowError, match="known PCIe boards: alveo-u250"):
        board("alveo-u280")
    assert set(BOARDS) == {"alveo-u250"}


def test_card_top_refuses_a_board_without_its_pins():
    from dataclasses import replace

    no_leds = replace(ALVEO_U250, ports=tuple(p for p in ALVEO_U250.ports if p.name != "led"))
    with pytest.raises(KeyError, match="has no port 'led'"):
        top_ports(no_leds)
    one_led = replace(ALVEO_U250, ports=tuple(replace(p, pins=p.pins[:1]) if p.name == "led" else p
                                              for p in ALVEO_U250.ports))
    with pytest.raises(ValueError, match="has 1 LEDs; the card top drives 3"):
        top_ports(one_led)
    assert "led" not in xdc(no_leds)


# --- Vivado's run, through a stand-in ------------------------------------------------------------------------------

def test_vivado_run_follows_the_steps_and_finds_the_products(tmp_path, monkeypatch):
    monkeypatch.setenv(vivado.VIVADO_ENV, str(_fake_vivado(tmp_path)))
    result = vivado.build(SMALL, "alveo-u250", tmp_path / "b", console=QUIET)
    assert result.vivado == str(tmp_path / "vivado")
    assert Path(result.bitstream).name == "arkdma.bit" and Path(result.flash_image).name == "arkdma.mcs"
    assert not any("yosys" in c for c in result.checks)  # Vivado synthesizes; the static checks still ran
    log = (tmp_path / "b" / "vivado.log").read_text()
    assert log.startswith(f"$ {tmp_path / 'vivado'} -mode batch") and "ARKDMA-STEP done" in log


def test_vivado_failure_ends_with_its_log(project, tmp_path, monkeypatch):
    folder = project[0]
    with pytest.raises(ToolFailed, match=r"(?s)vivado exited with status 1.*Command failed: the stand-in fails"):
        vivado.run_vivado(str(_fake_vivado(tmp_path, fail=True)), "build.tcl", folder, tmp_path / "vivado.log",
                          BUILD_STEPS, 60.0, QUIET)
    monkeypatch.setenv(vivado.VIVADO_ENV, str(tmp_path / "missing"))
    with pytest.raises(ToolMissing, match="VIVADO=.* names no executable"):
        vivado.find_vivado()


# --- flash through the hardware manager -------------------------------------------------------------------------

def test_flash_writes_the_hardware_manager_tcl_and_refuses_without_vivado(tmp_path, no_vivado):
    bit, mcs = tmp_path / "arkdma.bit", tmp_path / "arkdma.mcs"
    bit.write_bytes(b"bit")
    with pytest.raises(ToolMissing, match="Vivado was not found on PATH, so nothing was loaded.*flash.tcl"):
        vivado.flash("alveo-u250", bit)
    tcl = (tmp_path / "flash.tcl").read_text()
    check_tcl_balanced(tcl)
    for expected in ("open_hw_manager", "connect_hw_server -url localhost:3121", "open_hw_target",
                     "get_hw_devices xcu250_0", f"set image [file normalize {{{bit.resolve()}}}]",
                     "set_property PROGRAM.FILE $image $device", "program_hw_devices $device"):
        assert expected in tcl, expected
    assert "program_hw_cfgmem" not in tcl

    with pytest.raises(FpgaFlowError, match=r"no \.mcs at .*arkdma\.mcs"):
        vivado.flash("alveo-u250", bit, to_flash=True)  # a .bit with --to-flash means the .mcs beside it
    mcs.write_bytes(b"mcs")
    with pytest.raises(ToolMissing):
        vivado.flash("alveo-u250", bit, to_flash=True, hw_server="lab-pc:3121")
    tcl = (tmp_path / "flash.tcl").read_text()
    for expected in ("connect_hw_server -url lab-pc:3121", "get_cfgmem_parts {mt25qu01g-spi-x1_x2_x4}",
                     f"set image [file normalize {{{mcs.resolve()}}}]", "program_hw_cfgmem"):
        assert expected in tcl, expected

    with pytest.raises(FpgaFlowError, match="not a .bit file.*--to-flash"):
        vivado.flash("alveo-u250", mcs)
    with pytest.raises(FpgaFlowError, match="HOST:PORT"):
        vivado.flash("alveo-u250", bit, hw_server="lab-pc; exec rm")


def test_flash_runs_vivado_when_it_is_there(tmp_path, monkeypatch):
    monkeypatch.setenv(vivado.VIVADO_ENV, str(_fake_vivado(tmp_path)))
    (tmp_path / "arkdma.bit").write_bytes(b"bit")
    log = vivado.flash("alveo-u250", tmp_path / "arkdma.bit", console=QUIET)
    assert "ARKDMA-STEP program" in log.read_text()


# --- the command line ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, error", [
    (["fpga", "build", "--board", "alveo-u999"], "unknown board 'alveo-u999'; known boards: ecp5-evn (open flow), "
                                                 "alveo-u250 (Vivado)"),
    (["fpga", "build", "--board", "alveo-u250", "--clock", "200"], "--clock 200: on alveo-u250 the engine runs on "
                                                                   "the PCIe block's user clock, 250 MHz"),
    (["fpga", "build", "--board", "alveo-u250", "--core", "scratch"], "carries the engine core only"),
    (["fpga", "build", "--board", "alveo-u250", "--data-width", "512", "--dry-run"],
     "sets the PCIe IP up for 256-bit streams"),
    (["fpga", "build", "--board", "ecp5-evn", "--dry-run"], "--dry-run is for the Vivado boards"),
    (["fpga", "flash", "--board", "nope", "x.bit"], "unknown board 'nope'"),
    (["fpga", "flash", "--board", "alveo-u250", "a.bit", "--bitstream", "b.bit"], "two bitstreams given"),
])
def test_cli_refuses(argv, error, capsys):
    assert main(argv) != 0
    assert error in capsys.readouterr().err
