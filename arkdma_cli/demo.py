"""`arkdma demo`: the standard DMA workload on the best engine here, every byte checked, a table and a plot."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ark_runtime import engines
from arkdma_cli.arguments import byte_sizes, output_file, positive_int
from driver.errors import ArkdmaError
from driver.workload import WorkloadResult, WorkloadSpec


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the standard DMA workload on the best engine available and check every byte")
    p.add_argument("--engine", choices=engines.known(), help="force an engine (default: the best available)")
    p.add_argument("--sizes", type=byte_sizes, help="bytes per descriptor, comma-separated (e.g. 64,4096,1048576)")
    p.add_argument("--bytes-per-size", type=positive_int, default=WorkloadSpec.bytes_per_size,
                   help="bytes moved per size (default 4 MiB; at most 1024 descriptors)")
    p.add_argument("--plot", type=output_file, default=Path("out/demo.png"), help="PNG to write (default out/demo.png)")
    p.add_argument("--json", type=output_file, help="also write the rows as JSON")
    p.set_defaults(func=run)


def table(result: WorkloadResult) -> Table:
    t = Table(title=f"arkdma demo on engine '{result.engine}'")
    for col in ("bytes", "descriptors", "us / descriptor", "GB/s", "timebase", "checked"):
        t.add_column(col, justify="right", overflow="fold")  # never an ellipsis inside a number
    for r in result.rows:
        t.add_row(
            f"{r.bytes:,}", f"{r.descriptors:,}", f"{r.us_per_descriptor:.3f}", f"{r.gbps:.3f}",
            r.timebase, "ok" if r.verified else "[red]MISMATCH[/red]",
        )
    return t


def plot(result: WorkloadResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r.bytes for r in result.rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.plot(sizes, [r.gbps for r in result.rows], "o-")
    a.set(xscale="log", xlabel="bytes per descriptor", ylabel="GB/s", title="throughput")
    b.plot(sizes, [r.us_per_descriptor for r in result.rows], "o-")
    b.set(xscale="log", yscale="log", xlabel="bytes per descriptor", ylabel="us per descriptor", title="time per descriptor")
    timebase = result.rows[0].timebase if result.rows else ""
    fig.suptitle(f"arkdma demo, engine '{result.engine}' ({timebase})")
    for ax in (a, b):
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args, console: Console | None = None) -> int:
    console = console or Console()
    spec = WorkloadSpec(bytes_per_size=args.bytes_per_size)
    if args.sizes:
        spec = WorkloadSpec(sizes=args.sizes, bytes_per_size=args.bytes_per_size)
    if args.engine:
        name, why = args.engine, f"engine '{args.engine}' (asked for with --engine)"
    else:
        choice = engines.choose()
        name, why = choice.name, choice.explain()
    prov = engines.provider(name)
    reason = prov.unavailable_reason()
    if reason:
        console.print(f"[red]engine {name} cannot run here:[/red] {reason}")
        return 1
    limit = prov.max_workload_bytes
    if limit is not None and spec.total_bytes() > limit:
        raise ArkdmaError(
            f"this workload moves {spec.total_bytes():,} bytes, more than engine {name} should take in one run "
            f"({limit:,}; {prov.workload_pace}); give smaller --sizes or --bytes-per-size, or another --engine"
        )
    console.print(f"running on {why}")
    with console.status(f"running the workload on engine '{name}' ({spec.total_bytes():,} bytes; "
                        f"{prov.workload_pace})"):
        result = prov.run_workload(spec)
    console.print(table(result))
    for note in result.notes:
        console.print(note)
    if result.rows:
        plot(result, args.plot)
        console.print(f"plot: {args.plot}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"engine": result.engine, "rows": [r.as_dict() for r in result.rows]}, indent=2))
        console.print(f"json: {args.json}")
    if not result.verified:
        console.print("[red]some bytes did not arrive as sent[/red]")
        return 1
    return 0
