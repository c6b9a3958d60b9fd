"""`arkdma sim bench --card`: throughput against message size and one-descriptor latency of the whole card
(PCIe front end + engine) through cocotbext-pcie's UltraScale+ block model and root complex, per link.

One simulator run per (link, size), each playing sim/card_bench_session.py: one descriptor alone, then a
stream of descriptors kept in flight across the queue's window. Times are simulated time at the link's user
clock; `line_rate_fraction` is of the link's payload-limited rate (sim/card_bench_link.py)."""

from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rtl.params import EngineParams
from sim.card_bench_link import DEFAULT_LINK, Link, parse_link
from sim.job_types import ROUND_TRIP_NS
from sim.latency_model import gpu_driven_through_card

DEFAULT_SIZES = (64, 256, 1024, 4096, 8192, 16384, 65536, 262144, 1 << 20)
QUICK_SIZES = (64, 4096, 8192, 65536)
QUICK_TOTAL_BYTES = 16 << 10
MODEL_BYTES = 8192  # the end-to-end model's descriptor
JOB_ENV, RESULT_ENV = "ARKDMA_CARD_BENCH_JOB", "ARKDMA_SIM_RESULT"  # the job's file and the result's, JSON
GPU_STORE_BYTES = 16  # device.cuh's write_slot: a descriptor as two 16-byte stores
MAX_SIMULATED_BYTES = 16 << 20  # through the PCIe model a MiB takes ~15 s of simulation (the 64-bit card: ~2 min)


def card_params(**given) -> EngineParams:
    """The card's engine (sim/card.py): 256-bit unless `data_width` says 64, 128 or 512."""
    from fpga.cores.pcie_card_top import card_params as card

    return card(**given)


@dataclass(frozen=True)
class CardBenchConfig:
    links: tuple[Link, ...] = (parse_link(DEFAULT_LINK),)
    params: EngineParams = field(default_factory=card_params)
    round_trip_ns: float = ROUND_TRIP_NS  # host memory: a read request's arrival -> its completions leave
    sizes: tuple[int, ...] = DEFAULT_SIZES
    total_bytes: int = 64 << 10  # streamed per size
    min_descriptors: int = 1  # per size, whatever total_bytes says (one: the lone descriptor's run is the stream)
    # descriptors reach the window as a GPU producer writes them: 16-byte stores, each a TLP (device.cuh's
    # write_slot); 0: one write per batch, cut by the root complex at its max payload size
    store_bytes: int = GPU_STORE_BYTES

    def __post_init__(self) -> None:
        if not self.links:
            raise ValueError("name at least one link")
        if not self.sizes or any(s <= 0 for s in self.sizes):
            raise ValueError(f"sizes must be positive byte counts, not {self.sizes}")
        if self.round_trip_ns < 0:
            raise ValueError(f"the host memory's round trip cannot be negative ({self.round_trip_ns} ns)")
        if self.store_bytes < 0 or self.store_bytes % 4:
            raise ValueError(f"store_bytes must be a multiple of 4 (0: whole batches), not {self.store_bytes}")
        if self.total_bytes <= 0 or self.min_descriptors < 1:
            raise ValueError("total_bytes and min_descriptors must be positive")
        from fpga.cores.pcie_card_top import interface_width

        bits = interface_width(self.params)
        wrong = [link.name for link in self.links if link.interface_bits != bits]
        if wrong:
            raise ValueError(f"{', '.join(wrong)} need the {512 if bits == 256 else 256}-bit interface; the "
                             f"{self.params.data_width}-bit engine's card has the {bits}-bit one (the 512-bit card: "
                             "--data-width 512 with --link gen3x16 or gen4x8)")
        if self.simulated_bytes() > MAX_SIMULATED_BYTES:
            raise ValueError(
                f"this bench would move {self.simulated_bytes():,} bytes through the PCIe model, more than the "
                f"{MAX_SIMULATED_BYTES:,} one run should take (15 s to two minutes of simulation per MiB); give fewer "
                "--sizes or --link, a smaller --total-bytes or --min-descriptors, or --quick")

    def count(self, size: int) -> int:
        return max(self.min_descriptors, math.ceil(self.total_bytes / size))

    def notify_every(self, size: int) -> int:
        """The completion word every this many descriptors, as `arkdma sim bench` asks for it."""
        return max(1, min(self.params.slots // 8, self.count(size) // 16))

    def simulated_bytes(self) -> int:
        return len(self.links) * sum(size * (1 + (self.count(size) if self.count(size) > 1 else 0))
                                     for size in self.sizes)

    def as_dict(self) -> dict:
        return {"round_trip_ns": self.round_trip_ns,
                "round_trip_basis": "host memory answers each read this long after the request reaches the root "
                                    "complex (reads overlap); the card also sees the link's own transit",
                "total_bytes_per_size": self.total_bytes, "min_descriptors": self.min_descriptors,
                "store_bytes": self.store_bytes,
                "store_basis": ("descriptors written into the window in posted writes of this many bytes, as a GPU "
                                "thread's stores (device.cuh: two 16-byte stores a descriptor), one doorbell a batch"
                                if self.store_bytes else "descriptors written one batch per write, cut into TLPs by "
                                "the root complex at its max payload size, one doorbell a batch"),
                "params": self.params.as_dict()}


def job(config: CardBenchConfig, link: Link, size: int) -> dict:
    from sim.card import bar0_bytes

    return {"link": link.as_dict(), "round_trip_ns": config.round_trip_ns, "size": size,
            "count": config.count(size), "notify_every": config.notify_every(size),
            "bar0_bytes": bar0_bytes(config.params), "store_bytes": config.store_bytes}


def run_size(model, job_: dict) -> dict:
    """One simulator run of sim/card_bench_session.py on the built card."""
    from sim.build import BUILD_ROOT, SimulationError, run

    (BUILD_ROOT / "runs").mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="card-bench-", dir=BUILD_ROOT / "runs"))
    job_file, result_file = run_dir / "job.json", run_dir / "result.json"
    job_file.write_text(json.dumps(job_))
    run(model, "sim.card_bench_session", run_dir, testcase="card_bench",
        env={JOB_ENV: str(job_file), RESULT_ENV: str(result_file)})
    if not result_file.exists():
        raise SimulationError(f"the card bench finished without a result; see {run_dir / 'sim.log'}")
    return json.loads(result_file.read_text())


def _median_gap(stamps: list[int]) -> float | None:
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    return statistics.median(gaps) if gaps else None


def size_row(link: Link, result: dict) -> dict:
    """One row: throughput from the first doorbell at the card to the last completion word in host memory
    (and from the first completion word to the last, the steady rate), one descriptor's latency, and the
    cycles the front end spends per TLP (median gap between the starts of consecutive TLPs of a kind). With
    one descriptor per size (a large one) the rate is the lone descriptor's bytes over its latency."""
    period = result["period_ns"]
    one, s = result["single"], result["stream"]
    size = one["bytes"]
    if s is None:
        count, gbps, steady, tlps = 1, size / (one["doorbell_to_word"] * period), None, one
        basis = "one descriptor: its bytes over doorbell -> completion word"
    else:
        count, words, tlps = s["descriptors"], s["samples"], s
        gbps = size * count / ((words[-1][0] - s["first_doorbell"]) * period)
        steady = ((words[-1][1] - words[0][1]) * size / ((words[-1][0] - words[0][0]) * period)
                  if len(words) > 1 and words[-1][0] > words[0][0] else None)
        basis = f"{count} descriptors in flight across the window: first doorbell -> last completion word"
    writes, completions = tlps["write_tlps"], tlps["completions"]
    return {
        "link": link.name, "bytes": size, "descriptors": count, "bytes_moved": size * count,
        "gbps": gbps, "line_rate_fraction": gbps / link.payload_rate_gbps, "gbps_steady": steady,
        "rate_basis": basis,
        "latency_cycles": one["doorbell_to_word"], "latency_ns": one["doorbell_to_word"] * period,
        "word_sent_cycles": one["doorbell_to_word_sent"], "word_sent_ns": one["doorbell_to_word_sent"] * period,
        "doorbell_to_first_read_cycles": one["doorbell_to_read"],
        "read_round_trip_ns": one["read_round_trip"] * period,
        "write_tlps": len(writes), "read_requests": len(tlps["read_requests"]), "completions": len(completions),
        "cycles_per_write_tlp": _median_gap([t for t, _ in writes]),
        "cycles_per_completion": _median_gap([t for t, _ in completions]),
        "write_tlp_bytes": statistics.median([4 * n for _, n in writes]) if writes else None,
        "completion_bytes": statistics.median([4 * n for _, n in completions]) if completions else None,
        "verified": bool(one["verified"] and (s is None or s["verified"])),
    }


def link_summary(config: CardBenchConfig, link: Link, rows: list[dict]) -> dict:
    period = 1000.0 / link.user_clk_mhz
    model_row = next((r for r in rows if r["bytes"] == MODEL_BYTES), None)
    model = None
    if model_row:
        model = gpu_driven_through_card(
            MODEL_BYTES, model_row["word_sent_ns"],
            f"simulated: {model_row['word_sent_cycles']} cycles at {link.user_clk_mhz:g} MHz, doorbell at the card's "
            f"pins -> the completion word's write request leaving them ({model_row['latency_cycles']} to the word in "
            f"host memory), {link.name}, host-memory reads answered after {config.round_trip_ns:g} ns").as_dict()
    biggest = max(rows, key=lambda r: r["bytes"])
    return {**link.as_dict(), "period_ns": period, "end_to_end_model": model,
            "per_tlp": {"basis": f"median cycles between consecutive TLPs of a kind at the card's pins in the "
                                 f"{biggest['bytes']:,} B row's run ({biggest['rate_basis']})",
                        "cycles_per_write_tlp": biggest["cycles_per_write_tlp"],
                        "write_tlp_bytes": biggest["write_tlp_bytes"],
                        "cycles_per_completion": biggest["cycles_per_completion"],
                        "completion_bytes": biggest["completion_bytes"]}}


def run(config: CardBenchConfig, console=None, on_row=None) -> dict:
    """Build the card, then one simulator run per link and size, with progress; `on_row(result)` after each."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from sim.build import build
    from sim.card import CARD

    model = build(config.params, console=console, top=CARD)
    plan = [(link, size) for link in config.links for size in config.sizes]
    stamp = model.directory / "build.stamp"
    result = {"bench": "card", **config.as_dict(),
              "model": {"top": model.top.name, "sources_digest": stamp.read_text() if stamp.exists() else None},
              "links": {}, "rows": [], "wall_seconds": {}, "complete": False}
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False, disable=console is None) as progress:
        task = progress.add_task("simulating", total=len(plan))
        for link, size in plan:
            label = f"{link.name}, {size:,} B x {config.count(size):,}"
            progress.update(task, description=f"simulating {label}")
            t0 = time.monotonic()
            result["rows"].append(size_row(link, run_size(model, job(config, link, size))))
            result["wall_seconds"][label] = round(time.monotonic() - t0, 1)
            rows = [r for r in result["rows"] if r["link"] == link.name]
            result["links"][link.name] = link_summary(config, link, rows)
            progress.advance(task)
            if on_row:
                on_row(result)
    result["complete"] = True
    result["verified"] = all(r["verified"] for r in result["rows"])
    return result
