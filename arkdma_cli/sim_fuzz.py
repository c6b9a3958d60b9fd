"""`arkdma sim fuzz`: a time-bounded campaign of generated scenarios on one engine, judged against the
reference engine and the prefix rule, with a progress line, a summary and a reproducer file per failure."""

from __future__ import annotations

import argparse
from pathlib import Path

from arkdma_cli.arguments import bounded_int, engine_name, output_dir
from driver.errors import ArkdmaError

DATA_WIDTHS = (64, 512)
WEEK = 7 * 24 * 3600


def register(ssub) -> None:
    f = ssub.add_parser(
        "fuzz", help="generated scenarios (Hypothesis) on an engine for N seconds, compared with the reference",
        description="Draws region layouts (unaligned bus bases, exact sizes, guard bytes), descriptor mixes over "
                    "several queues (NOTIFY, FENCE, IMM, zero and boundary lengths, 4 KiB crossings, every error "
                    "class), memory latencies and channel pauses (rtl), and a disable or global reset at an "
                    "arbitrary point; judges every run byte for byte against the reference engine, by the prefix "
                    "rule after a disable, by the hard-stop rule after a reset, and by liveness. Each kind of failure is written as a JSON "
                    "reproducer (shrunk to a minimal case on in-process engines).")
    f.add_argument("--seconds", type=bounded_int(1, WEEK, "seconds"), required=True, metavar="N", help="how long to run")
    f.add_argument("--engine", type=engine_name, default="rtl", metavar="E",
                   help="engine to fuzz: rtl (default), software-host, software-cuda or reference")
    f.add_argument("--data-width", type=int, choices=DATA_WIDTHS, default=512, help="rtl datapath bits (default 512)")
    f.add_argument("--out", type=output_dir, default=Path("fuzz-findings"), metavar="DIR",
                   help="where reproducers go (default ./fuzz-findings)")
    f.add_argument("--plain", action="store_true",
                   help="only plain cases (8-aligned bases, no bus errors, no reset in flight): a first look at a "
                        "new or changed engine")
    f.add_argument("--seed", type=bounded_int(0, (1 << 64) - 1, "seed"), default=None, help="seed of the campaign's round seeds (default: random)")
    f.add_argument("--max-descriptors", type=bounded_int(1, 4096, "descriptors per queue"), default=32,
                   help="most descriptors per queue in one case (default 32; the window holds 16)")
    f.add_argument("--no-shrink", action="store_true",
                   help="rtl: write failures as drawn (shrinking replays reductions, minutes per failure)")
    f.add_argument("--batch", type=bounded_int(1, 10_000, "cases per simulator run"), default=40, help="rtl: cases per simulator run (default 40)")
    f.set_defaults(func=run_fuzz)


def run_fuzz(args: argparse.Namespace) -> int:
    import random

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from ark_runtime import engines
    from driver.abi import Capability

    try:
        from sim.fuzz.campaign import Campaign
    except ImportError as exc:
        raise ArkdmaError(f"{exc.name} is missing: pip install 'arkdma[test]' (or run ./dev)") from exc
    prov = engines.provider(args.engine)
    reason = prov.unavailable_reason()
    if reason:
        raise ArkdmaError(f"engine {args.engine} cannot run here: {reason}")
    console = Console()
    bus_errors = bool(prov.capabilities() & Capability.BUS_ERRORS)
    if args.engine == "rtl":
        from sim.build import build
        from sim.fuzz.cases import GEOMETRY
        from sim.fuzz.rtl_runner import run_cases_rtl
        from rtl.params import EngineParams

        build(EngineParams(data_width=args.data_width, **GEOMETRY), console=console)
        campaign = Campaign(args.engine, None, args.out, bus_errors, args.plain, batch=args.batch,
                            max_descriptors=args.max_descriptors, shrink_batched=not args.no_shrink,
                            run_batch=lambda cs: run_cases_rtl(cs, data_width=args.data_width))
    else:
        campaign = Campaign(args.engine, lambda case: prov.run_scenarios([case.scenario])["generated"], args.out,
                            bus_errors, args.plain, max_descriptors=args.max_descriptors)
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), TimeElapsedColumn(), TextColumn("{task.fields[line]}"))
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(f"fuzz {args.engine}", total=args.seconds, line="")

        def show(t) -> None:
            progress.update(task, completed=min(t.seconds, args.seconds),
                            line=f"{t.cases:,} cases, {t.descriptors:,} descriptors, {len(t.findings)} failures")

        tally = campaign.run(args.seconds, show, random.Random(args.seed))
    print_summary(console, tally, args)
    return 1 if tally.findings else 0


def print_summary(console, tally, args) -> None:
    from rich.table import Table

    table = Table(title=f"arkdma sim fuzz: {tally.engine}" + (f", {args.data_width}-bit" if tally.engine == "rtl" else ""))
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_row("seconds", f"{tally.seconds:.0f}")
    table.add_row("Hypothesis runs", f"{tally.rounds:,}")
    table.add_row("cases", f"{tally.cases:,}")
    table.add_row("descriptors", f"{tally.descriptors:,}")
    table.add_row("bytes", f"{tally.bytes:,}")
    for kind, n in tally.controls.items():
        table.add_row(f"cases with control event: {kind}", f"{n:,}")
    table.add_row("failures (kinds)", str(len(tally.findings)))
    console.print(table)
    for f in tally.findings:
        console.print(f"[red]failure[/red] ({'minimal' if f.shrunk else 'as drawn'}, "
                      f"{f.case.descriptors} descriptors): {f.problems[0]}\n  reproducer: {f.file}")
