"""`arkdma sim bench`: throughput against message size, latency and front-end figures of the simulated engine."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from rtl.params import EngineParams
from sim.latency_model import gpu_driven_d2h
from sim.job_types import BenchAcceptJob, BenchSizeJob, Timing

DEFAULT_SIZES = (64, 256, 1024, 4096, 8192, 65536, 1 << 20)
MODEL_BYTES = 8192  # the end-to-end model's descriptor (D2H)
TARGETS = {"line_rate_fraction_from_1KiB": 0.95, "doorbell_to_first_read_cycles": 8,
           "per_descriptor_overhead_cycles": 16, "accepted_per_cycle": 1.0}


MAX_SIMULATED_BYTES = 256 << 20  # the default bench simulates about 40 MiB


@dataclass(frozen=True)
class BenchConfig:
    params: EngineParams = field(default_factory=EngineParams)
    clock_mhz: float = 250.0
    round_trip_ns: float = 1770.0  # read address -> first data, last write beat -> write response
    sizes: tuple[int, ...] = DEFAULT_SIZES
    total_bytes: int = 4 << 20  # per size
    min_descriptors: int = 4  # per size, whatever total_bytes says

    def __post_init__(self) -> None:
        if not self.sizes or any(s <= 0 for s in self.sizes):
            raise ValueError(f"sizes must be positive byte counts, not {self.sizes}")
        if self.clock_mhz <= 0 or self.round_trip_ns < 0:
            raise ValueError("the clock must be positive and the round trip not negative")
        if self.total_bytes <= 0 or self.min_descriptors < 2:
            raise ValueError("total_bytes must be positive and min_descriptors at least 2 (a rate needs two completions)")
        if self.simulated_bytes() > MAX_SIMULATED_BYTES:
            raise ValueError(
                f"this bench would simulate {self.simulated_bytes():,} bytes (about {self.simulated_cycles():,} engine "
                f"cycles), more than the {MAX_SIMULATED_BYTES:,} one run should take (tens of MiB take minutes of "
                "simulation); give smaller --sizes, --total-bytes or --min-descriptors"
            )

    def simulated_bytes(self) -> int:
        return sum(size * self.count(size) for size in self.sizes)

    def simulated_cycles(self) -> int:
        return self.simulated_bytes() * 8 // self.params.data_width

    @property
    def timing(self) -> Timing:
        return Timing(self.clock_mhz, self.round_trip_ns, self.round_trip_ns)

    @property
    def line_rate_gbps(self) -> float:
        return self.params.data_width * self.clock_mhz * 1e6 / 8 / 1e9

    def count(self, size: int) -> int:
        return max(self.min_descriptors, math.ceil(self.total_bytes / size))

    def notify_every(self, size: int) -> int:
        """The producer asks for the completion word every this many descriptors (and the engine writes it
        when the queue runs dry): often enough to recycle window slots, rare enough to cost no bandwidth."""
        return max(1, min(self.params.slots // 8, self.count(size) // 16))

    def as_dict(self) -> dict:
        return {"clock_mhz": self.clock_mhz, "round_trip_ns": self.round_trip_ns, "data_width": self.params.data_width,
                "line_rate_gbps": self.line_rate_gbps, "total_bytes_per_size": self.total_bytes,
                "min_descriptors": self.min_descriptors, "params": self.params.as_dict()}


def _rate(size: int, a: tuple[int, int], b: tuple[int, int], period_ns: float) -> float | None:
    """GB/s between two completion-word samples (cycle, completed)."""
    return (b[1] - a[1]) * size / ((b[0] - a[0]) * period_ns) if b[0] > a[0] and b[1] > a[1] else None


def size_row(config: BenchConfig, result: dict) -> dict:
    """One row: steady-state throughput from the first to the last completion seen (the pipeline is
    full by then), the same over the second half only (equal when steady), and with the ramp from the
    first doorbell; one descriptor's latency on an idle engine."""
    period = config.timing.period_ns
    s, single = result["stream"], result["single"]
    size, count, samples = s["bytes"], s["descriptors"], [tuple(x) for x in s["samples"]]
    first, last = samples[0], samples[-1]
    with_ramp = count * size / ((last[0] - s["first_doorbell"]) * period)
    steady = _rate(size, first, last, period) or with_ramp
    middle = next((x for x in samples if x[1] >= first[1] + (last[1] - first[1]) / 2), last)
    second_half = _rate(size, middle, last, period) or steady
    return {
        "bytes": size, "descriptors": count, "bytes_moved": size * count,
        "gbps": steady, "line_rate_fraction": steady / config.line_rate_gbps,
        "gbps_second_half": second_half, "gbps_with_ramp": with_ramp,
        "latency_cycles": single["doorbell_to_counter"], "latency_ns": single["doorbell_to_counter"] * period,
        "doorbell_to_first_read_cycles": single["doorbell_to_read"],
        "notify_every": config.notify_every(size), "completion_samples": len(samples),
        "verified": bool(s["verified"] and single["verified"]),
    }


def summarize(config: BenchConfig, rows: list[dict], accept: dict) -> dict:
    period = config.timing.period_ns
    rt_cycles = config.timing.cycles(config.round_trip_ns)
    smallest = min(rows, key=lambda r: r["bytes"])
    beats = math.ceil(smallest["bytes"] / config.params.data_bytes)
    overhead = smallest["latency_cycles"] - 2 * rt_cycles - beats
    figures = {
        "doorbell_to_first_read_cycles": smallest["doorbell_to_first_read_cycles"],
        "per_descriptor_overhead_cycles": overhead,
        "per_descriptor_overhead_basis": (f"{smallest['bytes']} B descriptor alone: doorbell -> counter write "
                                          f"({smallest['latency_cycles']} cycles) minus read round trip, write "
                                          f"response round trip ({rt_cycles} cycles each) and {beats} data beat(s)"),
        "accepted_per_cycle": accept["per_cycle"],
        "accept_basis": (f"{accept['descriptors']} 64-byte descriptors in the window, one doorbell: read requests "
                         f"per cycle from the first to the last ({accept['read_requests']} in {accept['cycles']} cycles)"),
    }
    model_row = next((r for r in rows if r["bytes"] == MODEL_BYTES), None)
    model = None
    if model_row:
        model = gpu_driven_d2h(MODEL_BYTES, model_row["latency_ns"],
                               f"simulated: {model_row['latency_cycles']} cycles at {config.clock_mhz:g} MHz, memory "
                               f"round trip {config.round_trip_ns:g} ns on reads and on write responses").as_dict()
    big = [r["line_rate_fraction"] for r in rows if r["bytes"] >= 1024]
    targets = {
        "line_rate_fraction_from_1KiB": {"want": TARGETS["line_rate_fraction_from_1KiB"],
                                         "got": min(big) if big else None},
        "doorbell_to_first_read_cycles": {"want": TARGETS["doorbell_to_first_read_cycles"],
                                          "got": figures["doorbell_to_first_read_cycles"]},
        "per_descriptor_overhead_cycles": {"want": TARGETS["per_descriptor_overhead_cycles"], "got": overhead},
        "accepted_per_cycle": {"want": TARGETS["accepted_per_cycle"], "got": accept["per_cycle"]},
    }
    for name, t in targets.items():
        higher_is_better = name in ("line_rate_fraction_from_1KiB", "accepted_per_cycle")
        t["met"] = t["got"] is not None and (t["got"] >= t["want"] - 1e-9 if higher_is_better else t["got"] <= t["want"])
    return {**config.as_dict(), "period_ns": period, "round_trip_cycles": rt_cycles, "rows": rows,
            "figures": figures, "accept": accept, "end_to_end_model": model, "targets": targets,
            "verified": all(r["verified"] for r in rows) and bool(accept["verified"])}


def run(config: BenchConfig, console=None) -> dict:
    """Build the model, then one simulator run per size and one for the accept rate, with progress."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from sim.build import build
    from sim.jobs import run_job

    build(config.params, console=console)
    timing = config.timing
    accept_count = min(config.params.slots, config.params.reads_outstanding)
    jobs = [(f"{size:,} B x {config.count(size):,}",
             BenchSizeJob(size, config.count(size), config.notify_every(size), timing)) for size in config.sizes]
    jobs.append((f"accept rate, {accept_count} x 64 B",
                 BenchAcceptJob(accept_count, timing)))
    rows, accept, wall = [], None, {}
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False, disable=console is None) as progress:
        task = progress.add_task("simulating", total=len(jobs))
        for label, job in jobs:
            progress.update(task, description=f"simulating {label}")
            t0 = time.monotonic()
            result = run_job(config.params, job)
            wall[label] = round(time.monotonic() - t0, 1)
            if isinstance(job, BenchAcceptJob):
                accept = result["accept"]
            else:
                rows.append(size_row(config, result))
            progress.advance(task)
    out = summarize(config, rows, accept)
    out["wall_seconds"] = wall
    return out


def table(result: dict):
    from rich.table import Table

    t = Table(title=f"simulated engine: {result['data_width']}-bit at {result['clock_mhz']:g} MHz "
                    f"(line rate {result['line_rate_gbps']:.1f} GB/s), memory round trip {result['round_trip_ns']:g} ns")
    for col in ("bytes", "descriptors", "GB/s", "of line", "GB/s 2nd half", "GB/s with ramp", "latency cycles",
                "latency ns", "doorbell->read", "checked"):
        t.add_column(col, justify="right")
    for r in result["rows"]:
        t.add_row(f"{r['bytes']:,}", f"{r['descriptors']:,}", f"{r['gbps']:.2f}", f"{r['line_rate_fraction']:.1%}",
                  f"{r['gbps_second_half']:.2f}", f"{r['gbps_with_ramp']:.2f}", f"{r['latency_cycles']:,}",
                  f"{r['latency_ns']:,.0f}", f"{r['doorbell_to_first_read_cycles']}",
                  "ok" if r["verified"] else "[red]MISMATCH[/red]")
    return t


def model_table(model: dict, title: str | None = None):
    from rich.table import Table

    t = Table(title=title or f"MODEL: end-to-end GPU-driven latency, one {model['bytes']:,} B {model['direction']} "
                             "descriptor")
    t.add_column("term")
    t.add_column("ns", justify="right")
    t.add_column("basis")
    for term in model["terms"]:
        t.add_row(term["name"], f"{term['ns']:,.0f}", term["basis"])
    t.add_row("[bold]total (model)[/bold]", f"[bold]{model['total_ns']:,.0f}[/bold]", "")
    return t


def targets_table(result: dict):
    from rich.table import Table

    f = result["figures"]
    t = Table(title="front end and targets")
    for col in ("figure", "measured", "target", "met"):
        t.add_column(col, justify="right" if col != "figure" else "left")
    tg = result["targets"]
    rows = (("fraction of line rate, worst from 1 KiB", f"{tg['line_rate_fraction_from_1KiB']['got']:.1%}"
             if tg["line_rate_fraction_from_1KiB"]["got"] is not None else "n/a", ">= 95%", "line_rate_fraction_from_1KiB"),
            ("doorbell -> first read request, cycles", str(f["doorbell_to_first_read_cycles"]), "<= 8",
             "doorbell_to_first_read_cycles"),
            ("per-descriptor overhead beyond the round trips, cycles", str(f["per_descriptor_overhead_cycles"]), "<= 16",
             "per_descriptor_overhead_cycles"),
            ("descriptors accepted per cycle (64 B)", f"{f['accepted_per_cycle']:.3f}", ">= 1", "accepted_per_cycle"))
    for name, got, want, key in rows:
        t.add_row(name, got, want, "yes" if tg[key]["met"] else "[red]no[/red]")
    return t


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["bytes"] for r in result["rows"]]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(sizes, [r["gbps"] for r in result["rows"]], "o-", label="GB/s (steady)")
    ax.axhline(result["line_rate_gbps"], color="grey", ls="--", lw=1, label="line rate")
    ax.set(xscale="log", xlabel="bytes per descriptor", ylabel="GB/s", ylim=(0, result["line_rate_gbps"] * 1.1))
    ax.set_xticks(sizes, [_size_label(s) for s in sizes], rotation=30, fontsize=8)
    frac = ax.twinx()
    frac.plot(sizes, [r["line_rate_fraction"] for r in result["rows"]], "s:", color="tab:orange",
              label="fraction of line rate")
    frac.set(ylabel="fraction of line rate", ylim=(0, 1.1))
    handles = ax.get_legend_handles_labels()[0] + frac.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"simulated {result['data_width']}-bit engine, {result['clock_mhz']:g} MHz, "
                 f"round trip {result['round_trip_ns']:g} ns", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _size_label(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def run_and_report(config: BenchConfig, json_path: Path) -> int:
    """The command: run, print the tables, write the JSON and the PNG beside it. Non-zero when any byte
    came out wrong (missed targets are reported, not failures)."""
    from rich.console import Console

    console = Console()
    result = run(config, console)
    console.print(table(result))
    console.print(targets_table(result))
    if result["end_to_end_model"]:
        console.print(model_table(result["end_to_end_model"]))
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(result, indent=1))
    png = json_path.with_suffix(".png")
    plot(result, png)
    console.print(f"wrote {json_path} and {png}")
    if not result["verified"]:
        console.print("[red]some destination bytes differ from their source: see the rows marked MISMATCH[/red]")
        return 1
    return 0

