"""`arkdma rtl estimate`: the engine's resources and maximum clock on ECP5 (fpga/flow/estimate.py does the work)."""

from __future__ import annotations

import argparse

from arkdma_cli.arguments import bounded_float, clock_mhz, output_file
from arkdma_cli.engine_options import add_param_options, params_from
from driver.errors import ArkdmaError

DEFAULT_PART = "LFE5UM5G-85F"  # the ECP5-5G EVN board's part


def register(rtl_subparsers) -> None:
    p = rtl_subparsers.add_parser(
        "estimate", help="synthesize, place and route the engine for ECP5 with the open flow; resources and fmax",
        description="Builds the engine out of context for an ECP5 part with yosys and nextpnr-ecp5 (YoWASP) and "
                    "reports LUTs, FFs, block RAMs and the maximum clock nextpnr finds. The first run of each "
                    "YoWASP tool compiles it (~1 min, cached).")
    p.add_argument("--json", type=output_file, metavar="FILE", help="write the report as JSON to FILE")
    p.add_argument("--part", type=part, default=DEFAULT_PART, help=f"ECP5 part (default {DEFAULT_PART})")
    p.add_argument("--freq", type=clock_mhz, default=125.0, metavar="MHZ", help="clock target (default 125)")
    p.add_argument("--seeds", type=seeds, default=(1,), metavar="N[,N...]",
                   help="placement seeds; fmax_mhz is the lowest over them (default 1)")
    p.add_argument("--build-dir", type=argparse_path, metavar="DIR",
                   help="where netlists, reports and logs go (default build/estimate/engine-dw<W>-<hash>)")
    p.add_argument("--timeout", type=bounded_float(0.0, 7 * 24 * 3600.0, "seconds per tool run"), default=3600.0,
                   metavar="S", help="limit per tool run (default 3600)")
    add_param_options(p, data_width=64)
    p.set_defaults(func=run)


def part(text: str) -> str:
    from fpga.flow.ooc_flow import PARTS

    if text not in PARTS:
        raise argparse.ArgumentTypeError(f"unknown ECP5 part {text!r}; known: {', '.join(sorted(PARTS))}")
    return text


def argparse_path(text: str):
    from pathlib import Path

    return Path(text)


def seeds(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        values = ()
    if not values or any(not 0 <= v < 1 << 31 for v in values):
        raise argparse.ArgumentTypeError(f"want placement seeds (0 .. 2^31-1) separated by commas, like 1,2,3; "
                                         f"not {text!r}")
    return values


def print_report(report, console) -> None:
    from rich.table import Table

    from fpga.flow.ooc_flow import LutMapper

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


def run(args: argparse.Namespace, console=None) -> int:
    from rich.console import Console

    try:
        from fpga.flow.estimate import estimate
    except ImportError as exc:
        raise ArkdmaError(f"the FPGA flow is missing ({exc.name}): pip install 'arkdma[hw]' (or run ./dev)") from exc
    console = console or Console()
    report = estimate(params_from(args), args.build_dir, part=args.part, target_mhz=args.freq, seeds=args.seeds,
                      timeout_s=args.timeout, console=console)
    print_report(report, console)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(report.to_json())
        console.print(f"wrote {args.json}")
    return 0
