"""The text of a Vivado project for a PCIe card: the XDC from the board's pin table, the Tcl that creates the
project, the PCIe IP and the runs up to the bitstream and the flash image, and the Tcl that loads either into a
board through the hardware manager. Vivado prints `ARKDMA-STEP <name>` before each step, which the runner follows."""

from __future__ import annotations

from dataclasses import dataclass

from fpga.boards.spec import PcieBoard
from fpga.cores.pcie4_ip import IP_MODULE, IP_NAME
from fpga.flow.vivado_ip import OPTIONAL

STEP = "ARKDMA-STEP"
BUILD_STEPS = ("project", "ip", "synth", "impl", "timing", "bitstream", "cfgmem", "done")


@dataclass(frozen=True)
class ProjectFiles:
    """Names (inside the build folder) of what the project reads and what it makes."""

    top: str  # the Verilog top's module name
    verilog: str
    xdc: str
    bitstream: str = "arkdma.bit"
    flash_image: str = "arkdma.mcs"
    timing_report: str = "timing.rpt"
    utilization_report: str = "utilization.rpt"


def _port_ref(name: str, width: int, bit: int) -> str:
    return f"{{{name}[{bit}]}}" if width > 1 else name


def xdc(board: PcieBoard) -> str:
    lines = [f"# Constraints of {board.description}: written by `arkdma fpga build` from fpga/boards/.", ""]
    lines += [f"set_property {name} {value} [current_design]" for name, value in board.bitstream_properties]
    lines.append("")
    for port in board.ports:
        for bit, pin in enumerate(port.pins):
            props = [("PACKAGE_PIN", pin.site)] + ([("IOSTANDARD", pin.iostandard)] if pin.iostandard else [])
            props += list(pin.extra)
            lines.append(f"set_property -dict {{{' '.join(f'{k} {v}' for k, v in props)}}} "
                         f"[get_ports {_port_ref(port.name, port.width, bit)}]")
    lines.append("")
    for clock in board.clocks:
        lines.append(f"create_clock -period {clock.period_ns:.3f} -name {clock.port} [get_ports {clock.port}]")
    # LEDs and PERST# are slow and asynchronous: no timing paths to close on them
    names = {port.name for port in board.ports}
    lines.append("")
    if "led" in names:
        lines += ["set_false_path -to [get_ports {led[*]}]", "set_output_delay 0 [get_ports {led[*]}]"]
    if "pcie_perst_n" in names:
        lines += ["set_false_path -from [get_ports pcie_perst_n]", "set_input_delay 0 [get_ports pcie_perst_n]"]
    lines.append("")
    return "\n".join(lines)


def _tcl_list(pairs: dict[str, str]) -> str:
    return " \\\n    ".join(f"CONFIG.{k} {{{v}}}" for k, v in pairs.items())


def project_tcl(board: PcieBoard, files: ProjectFiles, config: dict[str, str], *, jobs: int = 8,
                allow_timing_fail: bool = False) -> str:
    required = {k: v for k, v in config.items() if k not in OPTIONAL}
    optional = {k: v for k, v in config.items() if k in OPTIONAL}
    optional_list = " ".join(f"CONFIG.{k} {{{v}}}" for k, v in optional.items())
    readback = " ".join(f"CONFIG.{k} {{{v}}}" for k, v in required.items())
    timing_fail = ("puts \"arkdma: timing fails (WNS $wns ns); the bitstream is written as asked\""
                   if allow_timing_fail else
                   "error \"arkdma: timing fails: WNS $wns ns (see $origin/" + files.timing_report + "); "
                   "pass --allow-timing-fail for a bitstream that may not work\"")
    return f"""# Vivado project of the arkdma card on {board.description}.
# Written by `arkdma fpga build --board {board.name}`; run with: vivado -mode batch -source build.tcl
set origin [file dirname [file normalize [info script]]]
set jobs {jobs}

puts "{STEP} project"
create_project -force arkdma [file join $origin vivado] -part {board.part}
set_property target_language Verilog [current_project]
add_files -norecurse [file join $origin {files.verilog}]
add_files -fileset constrs_1 -norecurse [file join $origin {files.xdc}]
set_property top {files.top} [get_filesets sources_1]

puts "{STEP} ip"
create_ip -name {IP_NAME} -vendor xilinx.com -library ip -module_name {IP_MODULE}
set ip [get_ips {IP_MODULE}]
set_property -dict [list \\
    {_tcl_list(required)} \\
] $ip
# keys some IP versions lack: set where present (the IP's default is the same)
foreach {{key value}} [list {optional_list}] {{
    if {{[lsearch -exact [list_property $ip] $key] >= 0}} {{
        set_property $key $value $ip
    }} else {{
        puts "arkdma: this IP version has no $key; its default stands"
    }}
}}
# Vivado may adjust a value it does not accept: read every one back
foreach {{key value}} [list {readback}] {{
    set got [get_property $key $ip]
    if {{![string equal -nocase $got $value]}} {{
        error "arkdma: the PCIe IP took $key = '$got', not '$value'"
    }}
}}
generate_target all [get_files {IP_MODULE}.xci]

puts "{STEP} synth"
launch_runs synth_1 -jobs $jobs
wait_on_run synth_1
if {{[get_property PROGRESS [get_runs synth_1]] ne "100%"}} {{
    error "arkdma: synthesis failed; see [get_property DIRECTORY [get_runs synth_1]]/runme.log"
}}

puts "{STEP} impl"
launch_runs impl_1 -to_step route_design -jobs $jobs
wait_on_run impl_1
if {{[get_property PROGRESS [get_runs impl_1]] ne "100%"}} {{
    error "arkdma: implementation failed; see [get_property DIRECTORY [get_runs impl_1]]/runme.log"
}}

puts "{STEP} timing"
open_run impl_1
report_timing_summary -max_paths 10 -file [file join $origin {files.timing_report}]
report_utilization -file [file join $origin {files.utilization_report}]
set wns [get_property SLACK [get_timing_paths -max_paths 1 -nworst 1 -setup]]
if {{$wns < 0}} {{
    {timing_fail}
}}

puts "{STEP} bitstream"
write_bitstream -force [file join $origin {files.bitstream}]

puts "{STEP} cfgmem"
write_cfgmem -force -format mcs -size {board.flash_size_mb} -interface {board.flash_interface} \\
    -loadbit "up 0x{board.flash_address:08x} [file join $origin {files.bitstream}]" \\
    -file [file join $origin {files.flash_image}]

puts "{STEP} done"
"""


def flash_tcl(board: PcieBoard, image: str, *, to_flash: bool, hw_server: str) -> str:
    """Loads `image` (a .bit into the FPGA, or with `to_flash` a .mcs into the configuration flash)."""
    head = f"""# Load an arkdma image into {board.description} through Vivado's hardware manager.
# Written by `arkdma fpga flash --board {board.name}`; run with: vivado -mode batch -source flash.tcl
set image [file normalize {{{image}}}]
if {{![file exists $image]}} {{
    error "arkdma: no image at $image"
}}
puts "{STEP} connect"
open_hw_manager
connect_hw_server -url {hw_server}
open_hw_target
set device [lindex [get_hw_devices {board.hw_device}] 0]
if {{$device eq ""}} {{
    error "arkdma: no {board.hw_device} on the JTAG chain; devices: [get_hw_devices]"
}}
current_hw_device $device
refresh_hw_device -update_hw_probes false $device
"""
    if not to_flash:
        return head + f"""puts "{STEP} program"
set_property PROGRAM.FILE $image $device
program_hw_devices $device
refresh_hw_device $device
puts "{STEP} done"
"""
    return head + f"""puts "{STEP} cfgmem"
create_hw_cfgmem -hw_device $device [lindex [get_cfgmem_parts {{{board.flash_part}}}] 0]
set cfgmem [get_property PROGRAM.HW_CFGMEM $device]
set_property PROGRAM.ADDRESS_RANGE {{use_file}} $cfgmem
set_property PROGRAM.FILES [list $image] $cfgmem
set_property PROGRAM.UNUSED_PIN_TERMINATION {{pull-none}} $cfgmem
set_property PROGRAM.BLANK_CHECK 0 $cfgmem
set_property PROGRAM.ERASE 1 $cfgmem
set_property PROGRAM.CFG_PROGRAM 1 $cfgmem
set_property PROGRAM.VERIFY 1 $cfgmem
set_property PROGRAM.CHECKSUM 0 $cfgmem
create_hw_bitstream -hw_device $device [get_property PROGRAM.HW_CFGMEM_BITFILE $device]
program_hw_devices $device
refresh_hw_device $device
program_hw_cfgmem -hw_cfgmem $cfgmem
puts "{STEP} done"
"""
