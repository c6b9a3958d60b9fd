"""Out-of-context synthesis and place-and-route of one Amaranth design for an ECP5 part (yosys + nextpnr-ecp5).

Out of context: the design's ports stay internal nets (no I/O buffers, no pins), as a block
behind a bridge would see them, so a 512-bit AXI engine is timed without needing 1,500 pins.
nextpnr then also leaves the clock off the global network and times it as an ideal clock
(no skew term in the path); a board build (fpga/flow/board_build.py) puts it on a global buffer.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Iterator

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from fpga.flow import toolchain
from fpga.errors import FpgaFlowError, ToolFailed
from fpga.flow.reports import PnrReport, parse_nextpnr_report, parse_yosys_stat


@dataclass(frozen=True)
class Ecp5Part:
    name: str  # the part number without speed grade and package
    nextpnr_device: str  # nextpnr-ecp5's device flag, without the dashes
    package: str
    speed: int

    @property
    def ordering_code(self) -> str:
        return f"{self.name}-{self.speed}{self.package.replace('CABGA', 'BG')}"


PARTS = {p.name: p for p in (
    Ecp5Part("LFE5UM5G-85F", "um5g-85k", "CABGA381", 8),  # the ECP5-5G EVN board's part
    Ecp5Part("LFE5UM-85F", "um-85k", "CABGA381", 8),
    Ecp5Part("LFE5U-85F", "85k", "CABGA381", 8),
    Ecp5Part("LFE5U-45F", "45k", "CABGA381", 8),
    Ecp5Part("LFE5U-25F", "25k", "CABGA381", 8),
)}
DEFAULT_PART = "LFE5UM5G-85F"

# nextpnr-ecp5's heap placer weighs a connection's timing criticality against its wirelength by this factor
# (nextpnr's own default is 10). On the board-sized engine, where routing is three quarters of every long
# path, 300 gave 110.8 / 110.6 / 110.3 MHz on seeds 1-3 (101.7 / 110.0 / 105.8 on seeds 4-6) against
# 97.4 / 93.2 / 100.9 / 95.6 at 10, the same netlist; docs/hardware-engine.md has the sweep (10 to 2000).
PLACER_TIMING_WEIGHT = 300

# nextpnr's router (router1) rips up and reroutes the nets of paths that miss the target (--tmg-ripup) instead of
# stopping at the first legal routing. It leaves a design that meets the target as it was, and on one that misses
# it, works only on the failing paths: on the board-sized engine it took seed 3 from 122.91 to 131.23 MHz on the
# same placement, seeds 1 and 2 (134.10, 125.39) unchanged; docs/hardware-engine.md, the sixth pass.
ROUTER_TIMING_OPTIONS = ("--tmg-ripup",)


class LutMapper(str, Enum):
    ABC9 = "abc9"  # synth_ecp5's own
    ABC = "abc"  # the classic mapper: the fallback where this yosys build's abc9 crashes on a design


@dataclass(frozen=True)
class PnrRun:
    seed: int
    report: PnrReport
    seconds: float
    log: Path


@dataclass(frozen=True)
class FlowResult:
    part: Ecp5Part
    target_mhz: float
    lut_mapper: LutMapper
    cells: dict[str, int]  # after synthesis, by cell type
    runs: tuple[PnrRun, ...]  # one per placement seed (none for a synthesis-only run)
    seconds: dict[str, float]  # per step: convert, synthesize, place_and_route (all seeds), total
    logs: dict[str, Path]


# What each step took for the whole engine on a 2-core machine (small designs take seconds): the
# estimate's whole run is 5-15 minutes, most of it in place and route.
STEP_DURATIONS = {
    "convert": "usually under 30 s",
    "synthesize": "usually 1-4 min for the engine",
    "place_and_route": "usually 3-10 min per seed for the engine",
}


class _Steps:
    """Times the flow's steps and shows them with rich (a spinner and the elapsed time each)."""

    def __init__(self, progress: Progress):
        self.progress, self.seconds = progress, {}

    @contextmanager
    def step(self, key: str, description: str) -> Iterator[None]:
        description = f"{description}, {STEP_DURATIONS[key]}"
        console = self.progress.console
        if not console.is_terminal:  # a log file shows no spinner: say each step as it starts and ends
            console.print(f"started: {description}")
        task = self.progress.add_task(description, total=1)
        start = time.monotonic()
        yield
        self.seconds[key] = self.seconds.get(key, 0.0) + time.monotonic() - start
        self.progress.update(task, completed=1)
        if not console.is_terminal:
            console.print(f"done in {time.monotonic() - start:.0f} s: {key}")


def _yosys_script(top: str, mapper: LutMapper) -> str:
    """synth_ecp5 as it is (LUTs mapped by abc9), or with its map_luts step done by the classic abc."""
    if mapper == LutMapper.ABC9:
        synth = [f"synth_ecp5 -top {top} -json {top}.json"]
    else:
        synth = [f"synth_ecp5 -top {top} -run begin:map_luts", "techmap -map +/lattice/latches_map.v",
                 "abc -lut 4 -dress", "clean", f"synth_ecp5 -top {top} -json {top}.json -run map_cells:"]
    return "\n".join([f"read_rtlil {top}.il", *synth, "tee -q -o stat.json stat -json", ""])


def _abc9_crashed(log: Path) -> bool:
    # The YoWASP build's abc9 can exit without a message (seen on a block with yosys-detected logic
    # loops); the log then ends on the ABC command line.
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return bool(lines) and lines[-1].startswith("Running ABC command")


def run(design, workdir: Path, *, top: str = "top", part: str = DEFAULT_PART, target_mhz: float = 125.0,
        seeds: tuple[int, ...] = (1,), lut_mapper: LutMapper = LutMapper.ABC9, timeout_s: float = 3600.0,
        placer_timing_weight: int = PLACER_TIMING_WEIGHT, roots: tuple[Path, ...] = (),
        console: Console | None = None) -> FlowResult:
    """Converts `design` (an Amaranth Elaboratable; a wiring.Component's signature gives the ports) to
    RTLIL, synthesizes it with synth_ecp5 and places and routes it once per seed out of context,
    timed against `target_mhz` (no seeds: synthesis only). Files and logs go to `workdir`; every tool
    run is bounded by `timeout_s`.
    LUTs are mapped by `lut_mapper`; a crash of abc9 falls back to abc. The placer weighs timing by
    `placer_timing_weight` (nextpnr's --placer-heap-timingweight); the router reroutes failing paths
    (ROUTER_TIMING_OPTIONS)."""
    if part not in PARTS:
        raise FpgaFlowError(f"unknown ECP5 part {part!r}; known: {', '.join(PARTS)}")
    try:
        mapper = LutMapper(lut_mapper)
    except ValueError:
        raise FpgaFlowError(f"the LUT mapper is abc9 or abc, not {lut_mapper!r}") from None
    if target_mhz <= 0:
        raise FpgaFlowError(f"the target clock must be positive, not {target_mhz} MHz")
    if placer_timing_weight < 0:
        raise FpgaFlowError(f"the placer's timing weight must be >= 0, not {placer_timing_weight}")
    ecp5 = PARTS[part]
    yosys, nextpnr = toolchain.find("yosys"), toolchain.find("nextpnr-ecp5")
    workdir.mkdir(parents=True, exist_ok=True)
    logs = {"yosys": workdir / "yosys.log"}
    runs = []
    start = time.monotonic()
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=console or Console(stderr=True))
    with progress:
        steps = _Steps(progress)
        with steps.step("convert", f"Amaranth -> RTLIL ({top}.il)"):
            from amaranth.back import rtlil  # the runtime never imports Amaranth at module level

            (workdir / f"{top}.il").write_text(rtlil.convert(design, name=top))
        with steps.step("synthesize", f"yosys synth_ecp5 (log: {logs['yosys']})"):
            (workdir / "synth.ys").write_text(_yosys_script(top, mapper))
            try:
                yosys.run(["-s", "synth.ys"], logs["yosys"], workdir, timeout_s)
            except ToolFailed:
                if mapper != LutMapper.ABC9 or not _abc9_crashed(logs["yosys"]):
                    raise
                mapper, logs["yosys-abc9"] = LutMapper.ABC, logs["yosys"].rename(workdir / "yosys-abc9.log")
                (workdir / "synth.ys").write_text(_yosys_script(top, mapper))
                yosys.run(["-s", "synth.ys"], logs["yosys"], workdir, timeout_s)
        cells = parse_yosys_stat(workdir / "stat.json")
        for seed in seeds:
            log = workdir / f"nextpnr-seed{seed}.log"
            logs[f"nextpnr-seed{seed}"] = log
            report = workdir / f"report-seed{seed}.json"
            t0 = time.monotonic()
            with steps.step("place_and_route",
                            f"nextpnr-ecp5 {ecp5.ordering_code} at {target_mhz:g} MHz, seed {seed} (log: {log})"):
                nextpnr.run([f"--{ecp5.nextpnr_device}", "--package", ecp5.package, "--speed", str(ecp5.speed),
                             "--json", f"{top}.json", "--out-of-context", "--freq", f"{target_mhz:g}",
                             "--seed", str(seed), "--placer-heap-timingweight", str(placer_timing_weight),
                             *ROUTER_TIMING_OPTIONS, "--report", report.name, "--timing-allow-fail"],
                            log, workdir, timeout_s)
            runs.append(PnrRun(seed, parse_nextpnr_report(report, roots), time.monotonic() - t0, log))
    seconds = {**steps.seconds, "total": time.monotonic() - start}
    return FlowResult(ecp5, target_mhz, mapper, cells, tuple(runs), seconds, logs)
