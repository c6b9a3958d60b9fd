"""`arkdma fpga build|flash`: a bitstream for a board with the open flow, and loading it with openFPGALoader."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from ark_runtime.cli.arguments import bounded_float, bounded_int, clock_mhz, output_file, seconds
from ark_runtime.cli.engine_options import add_param_options, params_from
from driver.errors import ArkdmaError

BOARD_DATA_WIDTH = 64  # board builds default to the 64-bit engine (the ECP5 target)

bus_address = bounded_int(0, 0xFFFF_FFFF, "a 32-bit bus address")
word32 = bounded_int(0, 0xFFFF_FFFF, "a 32-bit value")
link_timeout = bounded_float(0.0, 60.0, "a wait per access in seconds")

CORES = {
    "engine": "the DMA engine with its host-memory port on on-chip RAM, its BAR behind the UART bridge",
    "scratch": "the UART bridge over scratch registers: proves clock, pins and serial link first",
}


def register(sub) -> None:
    p = sub.add_parser("fpga", help="build a bitstream for a board (open flow) or load one into it")
    fsub = p.add_subparsers(dest="fpga_command", required=True, metavar="ACTION")

    b = fsub.add_parser("build", help="synthesize, place, route and pack a bitstream for a board",
                        description="Builds a bitstream with yosys, nextpnr-ecp5 and ecppack (YoWASP). The board "
                                    "has no open PCIe core: the engine's BAR is reached over the board's UART and "
                                    "its host memory is on-chip RAM (see fpga/README.md).")
    b.add_argument("--board", default="ecp5-evn", help="board (default ecp5-evn)")
    b.add_argument("--core", default="engine", choices=sorted(CORES),
                   help="; ".join(f"{k}: {v}" for k, v in CORES.items()) + " (default engine)")
    b.add_argument("--clock", type=clock_mhz, default=125.0, metavar="MHZ",
                   help="core clock the PLL should make (default 125; it reports what its dividers reach)")
    b.add_argument("--baud", type=int, default=115200, help="UART baud rate (default 115200)")
    b.add_argument("--seed", type=int, default=1, help="placement seed (default 1)")
    b.add_argument("--allow-timing-fail", action="store_true", help="write a bitstream even when timing fails")
    b.add_argument("--build-dir", type=Path, default=None, metavar="DIR",
                   help="where the products and logs go (default build/fpga/<board>-<core>)")
    b.add_argument("--timeout", type=seconds, default=3600.0, metavar="S", help="limit for the build (default 3600)")
    b.add_argument("--json", type=output_file, metavar="FILE", help="write the build's figures as JSON to FILE")
    b.add_argument("--ram-kib", type=int, default=64, metavar="KIB",
                   help="on-chip RAM the engine core uses as host memory (default 64)")
    add_param_options(b, data_width=BOARD_DATA_WIDTH)
    b.set_defaults(func=run_build)

    f = fsub.add_parser("flash", help="load a bitstream into the board with openFPGALoader")
    f.add_argument("--board", default="ecp5-evn", help="board (default ecp5-evn)")
    f.add_argument("--bitstream", type=Path, default=None, metavar="FILE",
                   help="bitstream (default build/fpga/<board>-engine/arkdma.bit)")
    f.add_argument("--to-flash", action="store_true",
                   help="write the SPI flash (survives power-off) instead of the FPGA's SRAM")
    f.set_defaults(func=run_flash)

    for name, help_text in (("probe", "say which core answers on the serial link and read its identity"),
                            ("peek", "read 32-bit words through the bridge"),
                            ("poke", "write a 32-bit word through the bridge")):
        s = fsub.add_parser(name, help=help_text,
                            description=f"{help_text[0].upper()}{help_text[1:]}. Addresses: engine registers from "
                                        "0, submission windows from WINDOW_BASE, on-chip RAM from 0x80000000.")
        s.add_argument("--port", required=True, metavar="DEV",
                       help="serial device of the board, e.g. /dev/ttyUSB1, or tcp://HOST:PORT (arkdma sim board)")
        s.add_argument("--baud", type=int, default=115200, help="the build's baud rate (default 115200)")
        s.add_argument("--timeout", type=link_timeout, default=1.0, metavar="S", help="wait per access (default 1)")
        if name == "probe":
            s.add_argument("--dma", action="store_true",
                           help="then run a loopback DMA through the engine (board RAM to board RAM) and check it")
        if name == "peek":
            s.add_argument("addr", nargs="+", type=bus_address, help="addresses (0x.. for hex)")
        if name == "poke":
            s.add_argument("addr", type=bus_address, help="address (0x.. for hex)")
            s.add_argument("value", type=word32, help="32-bit value (0x.. for hex)")
        s.set_defaults(func=run_link)


def _core_factory(args: argparse.Namespace):
    if args.core == "scratch":
        from fpga.cores.scratch_core import ScratchCore

        return lambda mhz: ScratchCore(mhz, args.baud)
    from fpga.cores.engine_core import EngineCore

    params = params_from(args)
    return lambda mhz: EngineCore(params, mhz, args.baud, args.ram_kib * 1024)


def run_build(args: argparse.Namespace, console: Console | None = None) -> int:
    from fpga.flow import board_build

    console = console or Console()
    build_dir = args.build_dir or Path("build") / "fpga" / f"{args.board}-{args.core}"
    result = board_build.build(_core_factory(args), args.board, build_dir, clock_mhz=args.clock, seed=args.seed,
                               allow_timing_fail=args.allow_timing_fail, timeout_s=args.timeout, console=console)
    verdict = "meets timing" if result.meets_timing else "MISSES timing"
    console.print(f"{result.bitstream}: {args.core} core at {result.clock_mhz:g} MHz ({verdict}, fmax "
                  f"{result.fmax_mhz:.1f} MHz), {result.luts} LUT4, {result.ffs} FF, {result.brams} DP16KD, "
                  f"{result.io} I/O; {result.seconds:g} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"core": args.core, **result.as_dict()}, indent=2) + "\n")
        console.print(f"wrote {args.json}")
    return 0


def run_flash(args: argparse.Namespace) -> int:
    from fpga.flow import board_build

    bitstream = args.bitstream or Path("build") / "fpga" / f"{args.board}-engine" / f"{board_build.NAME}.bit"
    log = board_build.flash(bitstream, args.board, to_flash=args.to_flash)
    print(f"loaded {bitstream} into {args.board} ({'SPI flash' if args.to_flash else 'SRAM'}); log: {log}")
    return 0


def run_link(args: argparse.Namespace) -> int:
    from fpga.link.serial_link import SerialLink, probe

    with SerialLink(args.port, args.baud, args.timeout) as link:
        if args.fpga_command == "probe":
            found = probe(link)
            for key, value in found.items():
                print(f"{key:>16} {value:#010x}" if isinstance(value, int) else f"{key:>16} {value}")
            if args.dma:
                if found["core"] != "engine":
                    raise ArkdmaError("--dma needs the engine core; this board runs the scratch core")
                from fpga.link.board import loopback

                result = loopback(link)
                print(f"loopback DMA: {result['bytes']} bytes copied and checked in {result['dma_seconds']} s "
                      f"(completion count {result['completed']})")
        elif args.fpga_command == "peek":
            for addr in args.addr:
                print(f"{addr:#010x} {link.read32(addr):#010x}")
        else:
            link.write32(args.addr, args.value)
    return 0
