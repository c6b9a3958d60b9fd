"""The software engine measured from the CPU side: what its loop costs per descriptor, and the
throughput it sustains D2H and H2D at 8 KiB, 64 KiB and 1 MiB with many descriptors in flight.

A NumPy producer on the CPU stands in for the GPU: it writes descriptors straight into a queue's
submission window and stores the doorbell word, keeping `inflight` descriptors posted, and polls
the completion word in pinned host memory. Throughput is bytes over wall-clock time from the first
doorbell to the last completion, median of `--repeats` runs after a warm-up run (spread: min..max).
The engine's own counters give the host cost: time the thread spent issuing per descriptor, CUDA
calls and copies per descriptor (merging shows as copies < descriptors). The copy engines' ceiling
is measured in the same run with CUDA events (256 MiB cudaMemcpyAsync) when CuPy reaches a GPU.
GPU-side post-to-completion latency is `arkdma bench dma`'s job, not this script's.

    python bench/software_engine_host_side.py --json out/sw_host_side.json --plot out/sw_host_side.png
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from driver.abi import COMPLETION_COUNT_MASK, COMPLETION_ERROR_BIT, Perm
from driver.dtypes import DESCRIPTOR_DTYPE
from host.engine import EngineStats, SoftwareEngine

KiB, MiB = 1024, 1 << 20
SLOTS = 1024
DIRECTIONS = {"D2H": ("device", "host"), "H2D": ("host", "device")}


@dataclass(frozen=True)
class EngineOptions:
    streams: int
    batch: bool

    @property
    def label(self) -> str:
        return f"{self.streams} stream{'s' if self.streams > 1 else ''}, {'batch' if self.batch else 'one call per copy'}"


@dataclass(frozen=True)
class Point:
    direction: str
    bytes: int
    inflight: int
    layout: str  # "contiguous" (descriptors merge) or "scattered" (gaps: one copy each)
    streams: int
    batch: bool
    descriptors: int  # per run
    gbps: float  # median
    gbps_min: float
    gbps_max: float
    us_per_descriptor: float  # wall clock / descriptors, median run
    host_ns_per_descriptor: float  # engine thread's issue time / descriptors
    api_calls_per_descriptor: float
    copies_per_descriptor: float
    completions_per_descriptor: float
    call_ns_per_descriptor: dict  # time inside each kind of CUDA call, per descriptor


@dataclass(frozen=True)
class Latency:
    direction: str
    bytes: int
    streams: int
    samples: int
    median_us: float
    p10_us: float
    p90_us: float
    host_ns_per_descriptor: float
    call_ns_per_descriptor: dict


def call_breakdown(s: EngineStats) -> dict:
    n = max(1, s.issued)
    return {k: round(getattr(s, "ns_" + k) / n, 1) for k in ("copy", "write", "record", "join", "query")}


class Rig:
    """One engine with a source and destination of each placement, and queue 0 set up so the CPU
    polls its completion word in pinned host memory."""

    def __init__(self, executor: str, options: EngineOptions, span: int):
        self.engine = SoftwareEngine(executor, num_queues=1, slots=SLOTS, num_regions=8,
                                     streams_per_queue=options.streams, batch_copies=options.batch,
                                     cpus="auto" if executor == "cuda" else None)
        self.options = options
        self.buffers = {}
        for i, place in enumerate(("host", "device")):
            buf = self.engine.alloc(span, place)
            buf.write(0, np.random.default_rng(i).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes())
            self.engine.set_region(i, buf.addr, span, Perm.READ | Perm.WRITE)
            self.buffers[place] = (i, buf)
        self.completion = self.engine.alloc(64, "host")
        self.completion.write(0, bytes(64))
        self.engine.set_region(7, self.completion.addr, 64, Perm.WRITE)
        self.engine.configure_queue(0, 7, 0, 0)
        self.engine.enable_queue(0)
        self.word = self.completion.view()[:8].view(np.uint64)
        p = self.engine.queue_pointers(0)
        raw = (ctypes.c_uint8 * (p.slots * 32)).from_address(p.window_host)
        self.window = np.ctypeslib.as_array(raw).view(DESCRIPTOR_DTYPE)
        self.doorbell = ctypes.c_uint32.from_address(p.doorbell_host)
        self.posted = 0

    def close(self) -> None:
        self.engine.close()

    def descriptors(self, direction: str, size: int, n: int, layout: str, span: int) -> np.ndarray:
        src_place, dst_place = DIRECTIONS[direction]
        stride = size if layout == "contiguous" else 2 * size
        chunks = max(1, span // stride)
        idx = np.arange(n, dtype=np.uint64) % np.uint64(chunks)
        d = np.zeros(n, DESCRIPTOR_DTYPE)
        d["src_region"], d["dst_region"] = self.buffers[src_place][0], self.buffers[dst_place][0]
        d["src_offset"] = idx * np.uint64(size) % np.uint64(span - size + 1)
        d["dst_offset"] = idx * np.uint64(stride)
        d["length"] = size
        return d

    def completed(self) -> int:
        w = int(self.word[0])
        if w >> COMPLETION_ERROR_BIT:
            st = self.engine.queue_state(0)
            raise RuntimeError(f"queue halted: {st.error.name} at {st.error_index}")
        return w & COMPLETION_COUNT_MASK

    def run(self, descs: np.ndarray, inflight: int, timeout: float = 60.0) -> float:
        """Post every descriptor with at most `inflight` outstanding; seconds from first doorbell to last completion."""
        n, start = len(descs), self.posted
        end = start + n
        chunk = max(1, inflight // 4)
        deadline = time.monotonic() + timeout
        t0 = time.perf_counter()
        posted, spins = start, 0
        while True:
            done = self.completed()
            if done >= end:
                break
            room = min(inflight - (posted - done), end - posted)
            if room > 0 and (room >= chunk or posted + room == end):
                while room:
                    slot = posted % SLOTS
                    k = min(room, SLOTS - slot)
                    self.window[slot : slot + k] = descs[posted - start : posted - start + k]
                    posted += k
                    room -= k
                self.doorbell.value = posted & 0xFFFFFFFF
            spins += 1
            if spins % 4096 == 0 and time.monotonic() > deadline:
                raise TimeoutError(f"completed {done - start} of {n} in {timeout} s")
        self.posted = end
        return time.perf_counter() - t0


def measure(rig: Rig, direction: str, size: int, inflight: int, layout: str, repeats: int, span: int,
            budget_bytes: int) -> Point:
    n = max(256, min(20000, budget_bytes // size))
    if inflight == 1:
        n = min(n, 2000)
    descs = rig.descriptors(direction, size, n, layout, span)
    rig.run(descs[: min(n, 256)], inflight)  # warm-up
    times, stats = [], []
    for _ in range(repeats):
        before = rig.engine.stats()
        times.append(rig.run(descs, inflight))
        stats.append(rig.engine.stats().minus(before))
    order = sorted(range(repeats), key=lambda i: times[i])
    mid = order[repeats // 2]
    s: EngineStats = stats[mid]
    rates = [n * size / t / 1e9 for t in times]
    return Point(direction, size, inflight, layout, rig.options.streams, rig.options.batch, n,
                 statistics.median(rates), min(rates), max(rates), times[mid] / n * 1e6, s.ns_per_descriptor,
                 s.api_calls / s.issued, s.copies / s.issued, s.completions / s.issued, call_breakdown(s))


def latency(rig: Rig, direction: str, size: int, samples: int) -> Latency:
    """One descriptor at a time: doorbell store to completion word seen by this (Python) thread."""
    descs = rig.descriptors(direction, size, samples + 100, "contiguous", 64 * MiB)
    out, before = [], None
    for i in range(samples + 100):
        if i == 100:
            before = rig.engine.stats()
        t0 = time.perf_counter_ns()
        rig.run(descs[i : i + 1], 1)
        out.append((time.perf_counter_ns() - t0) / 1e3)
    s = rig.engine.stats().minus(before)
    q = np.percentile(out[100:], [10, 50, 90])
    return Latency(direction, size, rig.options.streams, samples, float(q[1]), float(q[0]), float(q[2]), s.ns_per_descriptor,
                   call_breakdown(s))


def ceiling(direction: str, nbytes: int = 256 * MiB, repeats: int = 5) -> float | None:
    """GB/s of one big cudaMemcpyAsync between pinned host memory and the GPU, timed with CUDA events."""
    try:
        import cupy
    except ImportError:
        return None
    try:
        dev = cupy.empty(nbytes, cupy.uint8)
    except Exception:  # no GPU CuPy can use (the CUDA driver test double)
        return None
    host = cupy.cuda.alloc_pinned_memory(nbytes)
    kind = cupy.cuda.runtime.memcpyDeviceToHost if direction == "D2H" else cupy.cuda.runtime.memcpyHostToDevice
    dst, src = (host.ptr, dev.data.ptr) if direction == "D2H" else (dev.data.ptr, host.ptr)
    stream = cupy.cuda.Stream(non_blocking=True)
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    rates = []
    for i in range(repeats + 1):
        start.record(stream)
        cupy.cuda.runtime.memcpyAsync(dst, src, nbytes, kind, stream.ptr)
        stop.record(stream)
        stop.synchronize()
        if i:
            rates.append(nbytes / (cupy.cuda.get_elapsed_time(start, stop) / 1e3) / 1e9)
    return statistics.median(rates)


def parse_configs(text: str) -> list[EngineOptions]:
    """'1b,4b,1n' -> 1 stream with batch calls, 4 streams with batch calls, 1 stream one call per copy."""
    out = []
    for item in text.split(","):
        streams, kind = item[:-1], item[-1:]
        if not streams.isdigit() or kind not in "bn" or not kind:
            raise argparse.ArgumentTypeError(f"engine config {item!r}: give streams and b (batch) or n, e.g. 4b")
        out.append(EngineOptions(int(streams), kind == "b"))
    return out


def int_list(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


def sweep(executor: str, quick: bool, repeats: int, configs: list[EngineOptions], sizes: tuple[int, ...] | None = None,
          inflights: tuple[int, ...] | None = None, directions: tuple[str, ...] = tuple(DIRECTIONS)
          ) -> tuple[list[Point], list[Latency]]:
    span = 8 * MiB if quick else 512 * MiB
    budget = 4 * MiB if quick else 256 * MiB
    sizes = sizes or ((8 * KiB, 64 * KiB) if quick else (8 * KiB, 64 * KiB, MiB))
    inflights = inflights or ((1, 16) if quick else (1, 16, 64, 256))
    points, lat = [], []
    for opts in configs:
        rig = Rig(executor, opts, span)
        try:
            if opts.batch:
                for direction in directions:
                    for size in (64, 8 * KiB):
                        lat.append(latency(rig, direction, size, 200 if quick else 2000))
                        print_latency(lat[-1])
            for direction in directions:
                for size in sizes:
                    for layout in ("contiguous", "scattered"):
                        if not opts.batch and layout == "contiguous":
                            continue  # merged copies are one call either way
                        for inflight in inflights:
                            points.append(measure(rig, direction, size, inflight, layout, repeats, span, budget))
                            print_point(points[-1])
        finally:
            rig.close()
    return points, lat


def print_point(p: Point) -> None:
    print(f"{p.direction} {p.bytes:>8} B x{p.inflight:<4} {p.layout:<10} streams={p.streams} batch={int(p.batch)}: "
          f"{p.gbps:7.2f} GB/s [{p.gbps_min:.2f}-{p.gbps_max:.2f}]  {p.us_per_descriptor:7.2f} us/desc  "
          f"host {p.host_ns_per_descriptor:7.0f} ns/desc  calls/desc {p.api_calls_per_descriptor:.3f}  "
          f"copies/desc {p.copies_per_descriptor:.3f}  call ns/desc {p.call_ns_per_descriptor}", flush=True)


def print_latency(r: Latency) -> None:
    print(f"latency {r.direction} {r.bytes:>6} B, one at a time, streams={r.streams}: median {r.median_us:.2f} us "
          f"[p10 {r.p10_us:.2f}, p90 {r.p90_us:.2f}], engine issue {r.host_ns_per_descriptor:.0f} ns/desc "
          f"{r.call_ns_per_descriptor}", flush=True)


def plot(points: list[Point], path: Path, device: str, ceilings: dict | None = None) -> None:
    """GB/s against descriptors in flight: colour = size, solid = contiguous (merged), dashed = scattered,
    marker = engine config; the copy engines' ceiling as a grey line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({p.bytes for p in points})
    configs = sorted({(p.streams, p.batch) for p in points}, key=lambda c: (not c[1], c[0]))
    colours = dict(zip(sizes, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")))
    markers = dict(zip(configs, "os^vDx"))
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    for ax, direction in zip(axes, DIRECTIONS):
        if ceilings and ceilings.get(direction):
            ax.axhline(ceilings[direction], color="grey", lw=1, label=f"copy-engine ceiling {ceilings[direction]:.1f}")
        for size in sizes:
            for layout, style in (("contiguous", "-"), ("scattered", "--")):
                for cfg in configs:
                    row = sorted((p for p in points if (p.direction, p.bytes, p.layout, (p.streams, p.batch))
                                  == (direction, size, layout, cfg)), key=lambda p: p.inflight)
                    if row:
                        name = f"{size // KiB} KiB {layout}, {cfg[0]} stream{'s' if cfg[0] > 1 else ''}{'' if cfg[1] else ', no batch'}"
                        ax.plot([p.inflight for p in row], [p.gbps for p in row], style, marker=markers[cfg],
                                color=colours[size], label=name, alpha=0.85)
        ax.set(xscale="log", xlabel="descriptors in flight", title=direction)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("GB/s (median)")
    axes[1].legend(fontsize=6, ncol=2, loc="lower right")
    fig.suptitle(f"software engine, CUDA executor, CPU producer ({device})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarize(path: Path, streams: int, batch: bool = True) -> str:
    """A markdown table of one engine config from a results JSON: GB/s median [min-max] per in-flight count."""
    data = json.loads(path.read_text())
    rows = [r for r in data["rows"] if (r["streams"], r["batch"]) == (streams, batch)]
    inflights = sorted({r["inflight"] for r in rows})
    lines = [f"{data['device']}, {streams} stream(s), {'batch' if batch else 'one call per copy'}: GB/s, median [min-max]",
             "", "| direction | bytes | layout | " + " | ".join(f"{n} in flight" for n in inflights) + " |",
             "|---" * (3 + len(inflights)) + "|"]
    for key in sorted({(r["direction"], r["bytes"], r["layout"]) for r in rows}):
        cells = {r["inflight"]: r for r in rows if (r["direction"], r["bytes"], r["layout"]) == key}
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(
            f"{cells[n]['gbps']:.1f} [{cells[n]['gbps_min']:.1f}-{cells[n]['gbps_max']:.1f}]" if n in cells else ""
            for n in inflights) + " |")
    lines.append("")
    for lat in data["latency"]:
        if lat["streams"] == streams:
            lines.append(f"- one at a time, {lat['direction']} {lat['bytes']} B: doorbell to completion seen by the CPU "
                         f"{lat['median_us']:.1f} us [p10 {lat['p10_us']:.1f}, p90 {lat['p90_us']:.1f}]; engine issue "
                         f"{lat['host_ns_per_descriptor'] / 1e3:.2f} us/descriptor")
    if data.get("ceiling_gbps"):
        lines.append("- copy-engine ceiling (256 MiB, CUDA events): " +
                     ", ".join(f"{d} {g:.1f} GB/s" for d, g in data["ceiling_gbps"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--executor", default="cuda", choices=("cuda", "host"))
    ap.add_argument("--quick", action="store_true", help="a few small points (a smoke test)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--configs", type=parse_configs, default=parse_configs("1b,2b,4b,1n"),
                    help="engine configs in the order measured: streams per queue, b(atch) or n(o batch) (default 1b,2b,4b,1n)")
    ap.add_argument("--sizes", type=int_list, help="bytes per descriptor, comma-separated (default 8 KiB, 64 KiB, 1 MiB)")
    ap.add_argument("--inflight", type=int_list, help="descriptors in flight, comma-separated (default 1,16,64,256)")
    ap.add_argument("--directions", type=lambda t: tuple(t.split(",")), default=tuple(DIRECTIONS),
                    help="D2H, H2D or both (default)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--summarize", type=Path, help="print a markdown table from a results JSON and exit")
    ap.add_argument("--streams", type=int, default=4, help="with --summarize: the config to show (streams; batch calls)")
    args = ap.parse_args(argv)
    if args.summarize:
        print(summarize(args.summarize, args.streams))
        return 0
    from host import native

    device = native.cuda_probe().name if args.executor == "cuda" else "host memcpy"
    ceilings = {d: ceiling(d) for d in DIRECTIONS} if args.executor == "cuda" and not args.quick else {}
    for d, g in ceilings.items():
        print(f"copy-engine ceiling {d}: {g:.2f} GB/s (256 MiB cudaMemcpyAsync, CUDA events)" if g else f"{d}: no ceiling")
    unknown = set(args.directions) - set(DIRECTIONS)
    if unknown or (args.inflight and max(args.inflight) > SLOTS):
        ap.error(f"directions must be D2H/H2D (not {sorted(unknown)}) and in-flight counts at most {SLOTS}")
    points, lat = sweep(args.executor, args.quick, args.repeats, args.configs, args.sizes, args.inflight, args.directions)
    result = {"device": device, "executor": args.executor, "ceiling_gbps": ceilings,
              "rows": [asdict(p) for p in points], "latency": [asdict(r) for r in lat]}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    if args.plot:
        try:
            plot(points, args.plot, device, ceilings)
        except ImportError as exc:
            print(f"no plot: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
