"""`arkdma fpga build|flash`: a bitstream for a board, with the open flow (ECP5 EVN: yosys, nextpnr, loaded with
openFPGALoader) or with Vivado (PCIe cards: the Alveo U250, loaded through Vivado's hardware manager)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from arkdma_cli.arguments import bounded_float, bounded_int, clock_mhz, output_file, seconds
from arkdma_cli.engine_options import DefaultsFormatter, add_param_options, params_from
from driver.errors import ArkdmaError

bus_address = bounded_int(0, 0xFFFF_FFFF, "a 32-bit bus address")
word32 = bounded_int(0, 0xFFFF_FFFF, "a 32-bit value")
link_timeout = bounded_float(0.0, 60.0, "a wait per access in seconds")

CORES = {
    "engine": "the DMA engine with its host-memory port on on-chip RAM, its BAR behind the UART bridge",
    "scratch": "the UART bridge over scratch registers: proves clock, pins and serial link first",
}


def _build_defaults() -> dict[str, object]:
    """The engines `fpga build` makes unless told otherwise, for its help."""
    from fpga.cores.pcie_card_top import card_params
    from sim.board import board_params

    return {"ecp5-evn": board_params(), "alveo-u250": card_params()}


def register(sub) -> None:
    p = sub.add_parser("fpga", help="build a bitstream for a board (open flow) or load one into it")
    fsub = p.add_subparsers(dest="fpga_command", required=True, metavar="ACTION")

    b = fsub.add_parser("build", help="synthesize, place, route and pack a bitstream for a board",
                        formatter_class=DefaultsFormatter.of(_build_defaults),
                        description="ecp5-evn: builds a bitstream with yosys, nextpnr-ecp5 and ecppack (YoWASP); the "
                                    "board has no open PCIe core, so the engine's BAR is reached over the board's "
                                    "UART and its host memory is on-chip RAM (see fpga/README.md). alveo-u250: writes "
                                    "the Vivado project of the PCIe card (Verilog, XDC, PCIe IP configuration, Tcl; "
                                    "the card's 256-bit engine unless --data-width is given) and runs Vivado where it is installed; without Vivado, or with --dry-run, it "
                                    "checks the project instead (docs/card-bringup.md).")
    b.add_argument("--board", default="ecp5-evn", help="ecp5-evn (open flow, default) or alveo-u250 (Vivado)")
    b.add_argument("--core", default="engine", choices=sorted(CORES),
                   help="; ".join(f"{k}: {v}" for k, v in CORES.items()) + " (default engine)")
    b.add_argument("--clock", type=clock_mhz, default=None, metavar="MHZ",
                   help="core clock: on ecp5-evn what the PLL should make (default 125; it reports what its "
                        "dividers reach); on alveo-u250 the PCIe block's user clock, 250 and nothing else")
    b.add_argument("--baud", type=int, default=115200, help="UART baud rate (default 115200)")
    b.add_argument("--seed", type=int, default=1, help="placement seed (default 1)")
    b.add_argument("--allow-timing-fail", action="store_true", help="write a bitstream even when timing fails")
    b.add_argument("--build-dir", type=Path, default=None, metavar="DIR",
                   help="where the products and logs go (default build/fpga/<board>-<core>)")
    b.add_argument("--timeout", type=seconds, default=None, metavar="S",
                   help="limit for the build (default 3600; 14400 for Vivado)")
    b.add_argument("--dry-run", action="store_true",
                   help="alveo-u250: write and check the project (generic synthesis with yosys) without Vivado")
    b.add_argument("--jobs", type=bounded_int(1, 64, "Vivado jobs"), default=8, help="alveo-u250: Vivado jobs (default 8)")
    b.add_argument("--json", type=output_file, metavar="FILE", help="write the build's figures as JSON to FILE")
    b.add_argument("--ram-kib", type=int, default=64, metavar="KIB",
                   help="on-chip RAM the engine core uses as host memory (default 64)")
    add_param_options(b, description="the board's engine on ecp5-evn (the one `sim board` runs), the card's on "
                                     "alveo-u250 (its width's, with --data-width); a value given replaces the default "
                                     "for either")
    b.set_defaults(func=run_build)

    f = fsub.add_parser("flash", help="load a bitstream into the board (openFPGALoader, or Vivado's hardware manager)")
    f.add_argument("--board", default="ecp5-evn", help="ecp5-evn (openFPGALoader, default) or alveo-u250 (Vivado)")
    f.add_argument("bitfile", nargs="?", type=Path, default=None, metavar="BITFILE",
                   help="bitstream (default build/fpga/<board>-engine/arkdma.bit); with --to-flash on alveo-u250 the "
                        "arkdma.mcs beside it, or a .mcs named here")
    f.add_argument("--bitstream", type=Path, default=None, metavar="FILE", help="the same as BITFILE")
    f.add_argument("--to-flash", action="store_true",
                   help="write the configuration flash (survives power-off) instead of the FPGA's SRAM")
    f.add_argument("--hw-server", default="localhost:3121", metavar="HOST:PORT",
                   help="alveo-u250: Vivado hardware server to connect to (default localhost:3121)")
    f.set_defaults(func=run_flash)

    for name, help_text in (("probe", "find the board (UART, --port) or the card (PCIe, --pcie), read its identity "
                                      "and run DMA through it"),
                            ("peek", "read 32-bit words through the bridge"),
                            ("poke", "write a 32-bit word through the bridge")):
        s = fsub.add_parser(name, help=help_text,
                            description=f"{help_text[0].upper()}{help_text[1:]}. Addresses: engine registers from "
                                        "0, submission windows from WINDOW_BASE, on-chip RAM from 0x80000000.")
        s.add_argument("--port", required=name != "probe", metavar="DEV",
                       help="serial device of the board, e.g. /dev/ttyUSB1, or tcp://HOST:PORT (arkdma sim board)"
                            + ("; default $ARKDMA_CARD_UART" if name == "probe" else ""))
        s.add_argument("--baud", type=int, default=115200, help="the build's baud rate (default 115200)")
        if name == "probe":
            _add_probe_options(s)
            continue
        s.add_argument("--timeout", type=link_timeout, default=1.0, metavar="S", help="wait per access (default 1)")
        if name == "peek":
            s.add_argument("addr", nargs="+", type=bus_address, help="addresses (0x.. for hex)")
        if name == "poke":
            s.add_argument("addr", type=bus_address, help="address (0x.. for hex)")
            s.add_argument("value", type=word32, help="32-bit value (0x.. for hex)")
        s.set_defaults(func=run_link)


def _add_probe_options(s) -> None:
    s.description = ("With --port: say which core answers on the board's serial link and read its identity (--dma: "
                     "and copy board RAM to board RAM). With --pcie: list the arkdma cards sysfs shows (link, BAR0, "
                     "driver, IOMMU group), open one, read its ID, ABI version and capability registers, reset the "
                     "engine and copy host memory to host memory through it, then, where a CUDA GPU is, map its "
                     "BAR for GPU threads and copy into GPU memory. Each step says ok or FAILED and what to check; "
                     "exit status 1 on a failure. Do not probe a card a job is using: the probe resets its engine.")
    s.add_argument("--pcie", action="store_true", help="probe a card on PCIe, found through sysfs")
    s.add_argument("--device", metavar="BDF", help="--pcie: the card's PCI address, e.g. 0000:65:00.0 (needed when "
                                                   "there are several)")
    s.add_argument("--method", choices=("auto", "vfio", "sysfs"), default=None,
                   help="--pcie: map BAR0 through VFIO (DMA possible) or sysfs resource0 (registers only); default "
                        "auto: VFIO when the card is bound to vfio-pci")
    s.add_argument("--bytes", type=bounded_int(1, 1 << 30, "copy size in bytes"), default=None, metavar="N",
                   help="--pcie: size of the large loopback copy (default 1048576; a 61-byte copy runs first)")
    s.add_argument("--sysfs", type=Path, default=None, metavar="DIR",
                   help="--pcie: the PCI devices folder (default /sys/bus/pci/devices)")
    s.add_argument("--timeout", type=link_timeout, default=None, metavar="S",
                   help="wait per access over the UART (default 1), per register poll or DMA completion on PCIe "
                        "(default 5)")
    s.add_argument("--dma", action="store_true",
                   help="UART: then run a loopback DMA through the engine (board RAM to board RAM) and check it "
                        "(--pcie always runs its DMA steps)")
    s.add_argument("--json", type=output_file, metavar="FILE", help="write every step as JSON to FILE")
    s.set_defaults(func=run_probe)


def run_probe(args: argparse.Namespace) -> int:
    from arkdma_cli.fpga_probe import run_probe as probe

    return probe(args)


def _core_factory(args: argparse.Namespace):
    if args.core == "scratch":
        from fpga.cores.scratch_core import ScratchCore

        return lambda mhz: ScratchCore(mhz, args.baud)
    from fpga.cores.engine_core import EngineCore
    from sim.board import board_params

    params = params_from(args, board_params)  # the board-sized engine that card-uart-sim runs, unless overridden
    return lambda mhz: EngineCore(params, mhz, args.baud, args.ram_kib * 1024)


def _flow(board: str) -> str:
    """"open" or "vivado": which flow builds `board`; an unknown board is an error that lists them all."""
    from fpga.boards import BOARDS as PCIE_BOARDS
    from fpga.flow.board_build import BOARDS as OPEN_BOARDS

    if board in OPEN_BOARDS:
        return "open"
    if board in PCIE_BOARDS:
        return "vivado"
    known = [f"{name} (open flow)" for name in OPEN_BOARDS] + [f"{name} (Vivado)" for name in PCIE_BOARDS]
    raise ArkdmaError(f"unknown board {board!r}; known boards: {', '.join(known)}")


def run_build(args: argparse.Namespace, console: Console | None = None) -> int:
    console = console or Console()
    if _flow(args.board) == "vivado":
        return _run_vivado_build(args, console)
    if args.dry_run:
        raise ArkdmaError(f"--dry-run is for the Vivado boards; {args.board} builds with the open flow")
    from fpga.flow import board_build

    build_dir = args.build_dir or Path("build") / "fpga" / f"{args.board}-{args.core}"
    result = board_build.build(_core_factory(args), args.board, build_dir, clock_mhz=args.clock or 125.0,
                               seed=args.seed, allow_timing_fail=args.allow_timing_fail,
                               timeout_s=args.timeout or 3600.0, console=console)
    verdict = "meets timing" if result.meets_timing else "MISSES timing"
    console.print(f"{result.bitstream}: {args.core} core at {result.clock_mhz:g} MHz ({verdict}, fmax "
                  f"{result.fmax_mhz:.1f} MHz), {result.luts} LUT4, {result.ffs} FF, {result.brams} DP16KD, "
                  f"{result.io} I/O; {result.seconds:g} s")
    _write_json(args, {"core": args.core, **result.as_dict()}, console)
    return 0


def _write_json(args: argparse.Namespace, data: dict, console: Console) -> None:
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=2) + "\n")
        console.print(f"wrote {args.json}")


def _run_vivado_build(args: argparse.Namespace, console: Console) -> int:
    from fpga.cores.pcie_card_top import USER_CLOCK_MHZ, card_params, interface_width
    from rtl.pcie_completer import WIDTH
    from fpga.flow import vivado

    if args.core != "engine":
        raise ArkdmaError(f"{args.board} carries the engine core only (the PCIe card); --core {args.core} is for "
                          "the UART board")
    if args.clock is not None and args.clock != USER_CLOCK_MHZ:
        raise ArkdmaError(f"--clock {args.clock:g}: on {args.board} the engine runs on the PCIe block's user clock, "
                          f"{USER_CLOCK_MHZ:g} MHz at Gen3 x8 with 256-bit streams; leave --clock out")
    build_dir = args.build_dir or Path("build") / "fpga" / f"{args.board}-engine"
    # the card's engine (256-bit unless --data-width says otherwise), not the UART board's
    params = params_from(args, card_params)
    if interface_width(params) != WIDTH:
        raise ArkdmaError(f"--data-width {params.data_width}: the {args.board} build sets the PCIe IP up for "
                          f"{WIDTH}-bit streams (Gen3 x8); the 512-bit card (Gen3 x16) runs in simulation only")
    result = vivado.build(params, args.board, build_dir, dry_run=args.dry_run,
                          allow_timing_fail=args.allow_timing_fail, jobs=args.jobs,
                          timeout_s=args.timeout or 4 * 3600.0, console=console)
    for line in result.checks:
        console.print(f"checked: {line}")
    if result.vivado:
        console.print(f"{result.bitstream} and {result.flash_image}: built by {result.vivado} in {result.seconds:g} s "
                      f"(timing: {result.logs['timing']}); load with `arkdma fpga flash --board {args.board}`")
    else:
        why = "--dry-run given" if args.dry_run else "Vivado was not found on PATH (nor in $VIVADO)"
        console.print(f"no bitstream: {why}. The project in {build_dir} was written and checked as above; run "
                      f"`vivado -mode batch -source build.tcl` in that folder on a machine with Vivado, or "
                      f"install it ({vivado.INSTALL_VIVADO})")
    _write_json(args, {"core": args.core, **result.as_dict()}, console)
    return 0


def run_flash(args: argparse.Namespace) -> int:
    if args.bitfile and args.bitstream and args.bitfile != args.bitstream:
        raise ArkdmaError(f"two bitstreams given ({args.bitfile} and --bitstream {args.bitstream}): give one")
    image = args.bitfile or args.bitstream
    if _flow(args.board) == "vivado":
        from fpga.flow import vivado

        image = image or Path("build") / "fpga" / f"{args.board}-engine" / "arkdma.bit"
        log = vivado.flash(args.board, image, to_flash=args.to_flash, hw_server=args.hw_server)
        print(f"loaded {image} into {args.board} ({'configuration flash' if args.to_flash else 'FPGA'}); log: {log}")
        return 0
    from fpga.flow import board_build

    bitstream = image or Path("build") / "fpga" / f"{args.board}-engine" / f"{board_build.NAME}.bit"
    log = board_build.flash(bitstream, args.board, to_flash=args.to_flash)
    print(f"loaded {bitstream} into {args.board} ({'SPI flash' if args.to_flash else 'SRAM'}); log: {log}")
    return 0


def run_link(args: argparse.Namespace) -> int:
    from fpga.link.serial_link import SerialLink

    with SerialLink(args.port, args.baud, args.timeout) as link:
        if args.fpga_command == "peek":
            for addr in args.addr:
                print(f"{addr:#010x} {link.read32(addr):#010x}")
        else:
            link.write32(args.addr, args.value)
    return 0
