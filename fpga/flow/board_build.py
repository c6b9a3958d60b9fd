"""Board builds with the open flow (Amaranth's platform scripts on YoWASP tools) and flashing with openFPGALoader."""

from __future__ import annotations

import importlib
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from fpga.flow import pll
from fpga.flow import toolchain
from fpga.errors import FpgaFlowError, ToolFailed
from fpga.flow.ooc_flow import PLACER_TIMING_WEIGHT, ROUTER_TIMING_OPTIONS
from fpga.flow.reports import parse_nextpnr_report

NAME = "arkdma"  # file names of the build products: arkdma.bit, arkdma.svf, ...


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    platform: str  # "module:Class" of the Amaranth platform
    oscillator_mhz: float
    openfpgaloader: str  # openFPGALoader's -b name


BOARDS = {b.name: b for b in (
    Board("ecp5-evn", "Lattice ECP5-5G Evaluation Board (LFE5UM5G-85F-8BG381)",
          "amaranth_boards.ecp5_5g_evn:ECP55GEVNPlatform", 12.0, "ecp5_evn"),
)}


@dataclass(frozen=True)
class BoardBuild:
    board: str
    bitstream: str
    svf: str
    clock_mhz: float  # what the PLL makes (the nearest its dividers reach to the request)
    fmax_mhz: float  # nextpnr's figure for that clock after routing
    meets_timing: bool
    luts: int
    ffs: int
    brams: int
    io: int
    seconds: float
    logs: dict[str, str]

    def as_dict(self) -> dict:
        return asdict(self)


def board(name: str) -> Board:
    if name not in BOARDS:
        raise FpgaFlowError(f"unknown board {name!r}; known boards: {', '.join(BOARDS)}")
    return BOARDS[name]


def nextpnr_options(seed: int, allow_timing_fail: bool) -> str:
    """nextpnr-ecp5's options for the board build: the report the result is read from, the seed, and the placer's
    timing weight and the router's timing options of the estimate's flow (ooc_flow.PLACER_TIMING_WEIGHT,
    ROUTER_TIMING_OPTIONS), so the bitstream is placed and routed as estimated."""
    return (f"--report report.json --seed {seed} --placer-heap-timingweight {PLACER_TIMING_WEIGHT} "
            + " ".join(ROUTER_TIMING_OPTIONS) + (" --timing-allow-fail" if allow_timing_fail else ""))


def build(make_core: Callable[[float], object], board_name: str, build_dir: Path, *, clock_mhz: float = 125.0,
          seed: int = 1, allow_timing_fail: bool = False, timeout_s: float = 3600.0,
          console: Console | None = None) -> BoardBuild:
    """Builds a bitstream of `make_core(actual_clock_mhz)` on the board: the core sees the PLL's clock,
    the board's UART and LEDs (fpga.cores.evn_top). Fails when the design misses `clock_mhz`, unless allowed."""
    from fpga.cores.evn_top import EvnTop

    spec = board(board_name)
    env = {**os.environ, **toolchain.amaranth_env()}
    build_dir.mkdir(parents=True, exist_ok=True)
    log = build_dir / "build.log"
    start = time.monotonic()
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=console or Console(stderr=True))
    with progress:
        task = progress.add_task(f"ecppll {spec.oscillator_mhz:g} -> {clock_mhz:g} MHz", total=1)
        clock = pll.configure(spec.oscillator_mhz, clock_mhz, build_dir)
        progress.update(task, completed=1)

        task = progress.add_task("elaborate the board top", total=1)
        module, _, cls = spec.platform.partition(":")
        platform = getattr(importlib.import_module(module), cls)()
        plan = platform.prepare(EvnTop(make_core(clock.output_mhz), clock), NAME,
                                nextpnr_opts=nextpnr_options(seed, allow_timing_fail))
        plan.extract(str(build_dir))
        progress.update(task, completed=1)

        task = progress.add_task(f"yosys, nextpnr-ecp5, ecppack (log: {log})", total=1)
        runner = toolchain.Tool("build script", "sh")
        try:
            runner.run([f"{plan.script}.sh"], log, build_dir, timeout_s, env=env)
        except ToolFailed as exc:
            timing = build_dir / f"{NAME}.tim"
            if timing.exists() and "Max frequency" in timing.read_text() and "FAIL" in timing.read_text():
                raise FpgaFlowError(f"the design misses {clock.output_mhz:g} MHz on {spec.name} (see {timing}); "
                                    "build at a lower --clock, or pass --allow-timing-fail for a bitstream "
                                    "that may not work") from exc
            raise
        progress.update(task, completed=1)

    report = parse_nextpnr_report(build_dir / "report.json")
    # the core's clock is the PLL output: the timed clock whose constraint is nearest to it
    name = min(report.clocks, key=lambda c: abs(report.clocks[c].target_mhz - clock.output_mhz))
    timing = report.clocks[name]
    return BoardBuild(
        board=spec.name, bitstream=str(build_dir / f"{NAME}.bit"), svf=str(build_dir / f"{NAME}.svf"),
        clock_mhz=clock.output_mhz, fmax_mhz=round(timing.fmax_mhz, 2), meets_timing=timing.met,
        luts=report.used("TRELLIS_COMB"), ffs=report.used("TRELLIS_FF"), brams=report.used("DP16KD"),
        io=report.used("TRELLIS_IO"), seconds=round(time.monotonic() - start, 1),
        logs={"build": str(log), "yosys": str(build_dir / f"{NAME}.rpt"), "nextpnr": str(build_dir / f"{NAME}.tim")},
    )


def flash(bitstream: Path, board_name: str, *, to_flash: bool = False, timeout_s: float = 300.0) -> Path:
    """Loads `bitstream` into the board's FPGA (SRAM) or, with `to_flash`, writes its SPI flash; returns the log."""
    spec = board(board_name)
    if not bitstream.is_file():
        raise FpgaFlowError(f"no bitstream at {bitstream}: run `arkdma fpga build --board {spec.name}` first")
    loader = toolchain.find("openFPGALoader")
    log = bitstream.with_name("flash.log")
    loader.run(["-b", spec.openfpgaloader, *(["-f"] if to_flash else []), str(bitstream)], log, bitstream.parent,
               timeout_s)
    return log
