"""`arkdma bench dma`: GPU-driven copies through an engine against the CPU-controlled baseline and the two
CPU-free paths for transfers fixed at build time, every time taken on the GPU clock.

Paths (the `path` of each row):
  software   a GPU thread posts descriptors through device.cuh into the software engine (CUDA executor);
  baseline   CPU-controlled: kernel; sync; copies; sync; kernel;
  prearmed   copies queued ahead behind cuStreamWaitValue32 on a word the GPU thread writes;
  devgraph   the GPU thread launches a pre-instantiated device graph (copies + a completion token).
`inflight` 1 is one-way latency: from the post (trigger, launch) to the completion seen by the GPU.
For inflight N, `software` keeps N descriptors outstanding in a continuous stream (`latency_us` is then
the time one spends outstanding, N x elapsed / count) and the other paths move N copies per round
(`latency_us` is the round). `gbps` is bytes moved over GPU time.

Latencies come from clock64 calibrated against globaltimer over the whole loop (globaltimer alone
moves in steps of `timer_resolution_ns`); the CPU-controlled baseline, with the host between two
kernels, is timed with globaltimer stamps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bench import native_paths
from driver.abi import Perm
from driver.errors import ArkdmaError
from driver.gpu.launch import finish, launch
from driver.abi import DeviceCode

KiB, MiB = 1024, 1 << 20
KERNELS = (Path(__file__).parent / "kernels" / "dma_bench.cu").read_text()
PATHS = ("software", "baseline", "prearmed", "devgraph")
DIRECTIONS = ("D2H", "H2D", "D2D")
PLACES = {"D2H": ("device", "host"), "H2D": ("host", "device"), "D2D": ("device", "device2")}
SPAN = 64 * MiB  # offsets rotate over this many bytes
SLOTS = 256


@dataclass(frozen=True)
class DmaConfig:
    sizes: tuple[int, ...] = (64, 8 * KiB, 64 * KiB, MiB)
    directions: tuple[str, ...] = DIRECTIONS
    inflights: tuple[int, ...] = (1, 4, 16, 64)
    paths: tuple[str, ...] = PATHS
    layouts: tuple[str, ...] = ("contiguous", "scattered")
    engine_streams: tuple[int, ...] = (1, 4)
    latency_iterations: int = 300
    round_iterations: int = 100  # rounds of the baseline / pre-armed / device-graph paths per point
    stream_bytes: int = 256 * MiB  # per software throughput run (at most 20000 descriptors)
    repeats: int = 3
    budget_s: float = 2.0

    def software_points(self) -> list[tuple[int, str, int, int, str]]:
        """(streams, direction, bytes, inflight, layout) of every software measurement; inflight 1 is the
        latency, taken once per engine configuration."""
        out = []
        for streams in self.engine_streams if "software" in self.paths else ():
            for d in self.directions:
                for b in self.sizes:
                    for n in self.inflights:
                        for layout in self.layouts[:1] if n == 1 else self.layouts:
                            out.append((streams, d, b, n, layout))
        return out

    def points(self) -> int:
        rounds = len(self.sizes) * len(self.directions) * len(self.inflights)
        return len(self.software_points()) + rounds * sum(p != "software" for p in self.paths)


@dataclass(frozen=True)
class Row:
    path: str
    direction: str
    bytes: int
    inflight: int
    latency_us: float  # median (see the module's docstring for inflight > 1)
    gbps: float
    p10_us: float | None = None
    p90_us: float | None = None
    layout: str = "contiguous"  # software: "scattered" descriptors leave gaps, so the engine cannot merge them
    engine_streams: int | None = None  # software: CUDA streams per queue
    samples: int = 0
    timebase: str = ""
    copies_per_descriptor: float | None = None  # software: copies the engine started per descriptor (merging)
    post_us: float | None = None  # software latency: median GPU time of post() (slot stores, fence, doorbell)
    engine_issue_us: float | None = None  # software: the engine thread's time issuing one descriptor (its CUDA calls)


@dataclass
class DmaResult:
    device: str
    config: dict
    timer_resolution_ns: int
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"device": self.device, "config": self.config, "timer_resolution_ns": self.timer_resolution_ns,
                "rows": [asdict(r) for r in self.rows], "notes": self.notes}

    @classmethod
    def from_json(cls, d: dict) -> "DmaResult":
        """A result written by as_json() (the summaries beside it are recomputed, not read)."""
        return cls(d["device"], d["config"], d["timer_resolution_ns"], [Row(**r) for r in d["rows"]], d["notes"])

    def find(self, path: str, direction: str, nbytes: int, inflight: int, **match) -> Row | None:
        for r in self.rows:
            if (r.path, r.direction, r.bytes, r.inflight) == (path, direction, nbytes, inflight) and all(
                getattr(r, k) == v for k, v in match.items()
            ):
                return r
        return None


def calibrated_us(clk: np.ndarray, span_ns: int, span_clk: int) -> np.ndarray:
    """clock64 cycles -> microseconds, at the rate the loop's span shows (cycles per globaltimer ns)."""
    if span_ns <= 0 or span_clk <= 0:
        raise ValueError(f"cannot calibrate clock64 over a span of {span_ns} ns / {span_clk} cycles")
    return clk.astype(np.float64) / (span_clk / span_ns) / 1e3


def summary(us: np.ndarray) -> tuple[float, float, float]:
    p10, p50, p90 = np.percentile(us, [10, 50, 90])
    return float(p50), float(p10), float(p90)


class SoftwareRig:
    """The software engine with one GPU queue and buffers of every placement registered."""

    def __init__(self, streams: int, budget_s: float):
        import cupy

        from driver.device import Device
        from driver.gpu import compile
        from driver.gpu.queue import GpuQueue
        from host.engine import SoftwareEngine

        self.streams = streams
        self.engine = SoftwareEngine("cuda", num_queues=1, slots=SLOTS, num_regions=8, streams_per_queue=streams,
                                     cpus="auto")
        self.device = Device(self.engine)
        self.regions = {}
        size = SPAN + 2 * MiB
        for i, place in enumerate(("host", "device", "device2")):
            buf = self.device.alloc(size, "host" if place == "host" else "device")
            buf.write(0, np.random.default_rng(i).integers(0, 256, MiB, dtype=np.uint8).tobytes())
            self.regions[place] = self.device.register(buf, perms=Perm.READ | Perm.WRITE)
        self.queue = GpuQueue(self.device, 0, budget_s=budget_s)
        module = compile.load(KERNELS)
        self.latency_fn = module.get_function("latency")
        self.throughput_fn = module.get_function("throughput")
        self.cupy = cupy

    def close(self) -> None:
        self.queue.close()
        self.device.close()

    def _regions(self, direction: str) -> tuple[np.uint16, np.uint16]:
        src, dst = PLACES[direction]
        return np.uint16(self.regions[src].id), np.uint16(self.regions[dst].id)

    def _check(self, code: int, what: str) -> None:
        if DeviceCode(code) != DeviceCode.OK:
            raise RuntimeError(f"{what}: {DeviceCode(code).name}: {self.queue.status().describe()}; "
                               f"engine note: {self.engine.note() or 'none'}")

    def latency(self, direction: str, nbytes: int, iterations: int, warmup: int = 20) -> Row:
        cp = self.cupy
        ns, clk, post = cp.zeros(iterations, cp.uint64), cp.zeros(iterations, cp.int64), cp.zeros(iterations, cp.int64)
        span, result = cp.zeros(2, cp.uint64), cp.zeros(2, cp.uint64)
        src, dst = self._regions(direction)
        before = self.engine.stats()
        s = launch(self.latency_fn, 1, 32, (self.queue.handle(), src, dst, np.uint32(nbytes), np.uint64(max(nbytes, 4096)),
                                            np.uint64(SPAN), np.uint32(iterations), np.uint32(warmup), ns, clk, post,
                                            span, result))
        finish(s, 60, [self.queue])
        self._check(int(result.get()[0]), f"software latency {direction} {nbytes} B")
        st = self.engine.stats().minus(before)
        sp = span.get()
        us = calibrated_us(clk.get(), int(sp[0]), int(sp[1]))
        p50, p10, p90 = summary(us)
        post_us = float(np.median(calibrated_us(post.get(), int(sp[0]), int(sp[1]))))
        return Row("software", direction, nbytes, 1, p50, nbytes / p50 / 1e3, p10, p90, "contiguous", self.streams,
                   iterations, "clock64 calibrated to globaltimer", post_us=post_us,
                   engine_issue_us=st.ns_per_descriptor / 1e3)

    def throughput(self, direction: str, nbytes: int, inflight: int, layout: str, total_bytes: int,
                   repeats: int) -> Row:
        cp = self.cupy
        count = int(max(4 * inflight, min(20000, total_bytes // nbytes)))
        stride = nbytes if layout == "contiguous" else nbytes + 64
        span_bytes = SPAN // stride * stride
        batch = max(1, min(64, inflight // 4))
        src, dst = self._regions(direction)
        result = cp.zeros(5, cp.uint64)
        runs = []
        for rep in range(repeats + 1):  # the first run warms up
            before = self.engine.stats()
            s = launch(self.throughput_fn, 1, 32, (self.queue.handle(), src, dst, np.uint32(nbytes), np.uint64(stride),
                                                   np.uint64(span_bytes), np.uint32(count), np.uint32(inflight),
                                                   np.uint32(batch), result))
            finish(s, 120, [self.queue])
            r = result.get()
            self._check(int(r[0]), f"software throughput {direction} {nbytes} B x{inflight} {layout}")
            st = self.engine.stats().minus(before)
            if rep:
                runs.append((int(r[2]), st.copies / max(1, st.issued), st.ns_per_descriptor / 1e3))
        runs.sort()
        elapsed_ns, copies, issue_us = runs[len(runs) // 2]
        gbps = count * nbytes / elapsed_ns
        return Row("software", direction, nbytes, inflight, elapsed_ns / count * inflight / 1e3, gbps, layout=layout,
                   engine_streams=self.streams, samples=repeats, timebase="globaltimer over the stream",
                   copies_per_descriptor=copies, engine_issue_us=issue_us)


def round_row(path: str, direction: str, nbytes: int, inflight: int, s: native_paths.Samples) -> Row:
    if s.clk is not None:
        us, timebase = calibrated_us(s.clk, s.span_ns, s.span_clk), "clock64 calibrated to globaltimer"
    else:
        us, timebase = s.ns.astype(np.float64) / 1e3, "globaltimer stamps"
    p50, p10, p90 = summary(us)
    return Row(path, direction, nbytes, inflight, p50, nbytes * inflight / p50 / 1e3, p10, p90, samples=len(us),
               timebase=timebase)


def run(config: DmaConfig, progress=None) -> DmaResult:
    """Every point of `config`; `progress(description)` is called before each one."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    result = DmaResult(props["name"].decode(), asdict(config), native_paths.timer_resolution_ns())
    tick = progress or (lambda what: None)
    points = config.software_points()
    for streams in dict.fromkeys(p[0] for p in points):
        rig = SoftwareRig(streams, config.budget_s)
        try:
            for _, direction, nbytes, inflight, layout in (p for p in points if p[0] == streams):
                tick(f"software ({streams} stream{'s' if streams > 1 else ''}) {direction} {nbytes} B x{inflight} {layout}")
                try:
                    if inflight == 1:
                        result.rows.append(rig.latency(direction, nbytes, config.latency_iterations))
                    else:
                        result.rows.append(rig.throughput(direction, nbytes, inflight, layout, config.stream_bytes,
                                                          config.repeats))
                except (ArkdmaError, RuntimeError, ValueError) as exc:
                    result.notes.append(f"software ({streams} streams) {direction} {nbytes} B x{inflight} {layout} "
                                        f"failed: {exc}")
        finally:
            rig.close()
    runners = {"baseline": native_paths.baseline, "prearmed": native_paths.prearmed, "devgraph": native_paths.devgraph}
    for path in (p for p in config.paths if p in runners):
        worker = Worker() if path == "devgraph" else None
        for direction in config.directions:
            for nbytes in config.sizes:
                for inflight in config.inflights:
                    tick(f"{path} {direction} {nbytes} B x{inflight}")
                    iterations = config.latency_iterations if inflight == 1 else config.round_iterations
                    args = (direction, nbytes, inflight, iterations) + (() if path == "baseline" else (config.budget_s,))
                    try:
                        samples = worker.call(runners[path], *args) if worker else runners[path](*args)
                        result.rows.append(round_row(path, direction, nbytes, inflight, samples))
                    except Exception as exc:  # noqa: BLE001 - one failing point must not lose the others
                        result.notes.append(f"{path} {direction} {nbytes} B x{inflight} ({iterations} rounds) "
                                            f"failed: {type(exc).__name__}: {exc}")
            if worker:
                worker.close()  # a fresh CUDA context per direction
    return result


class Worker:
    """Runs calls in a spawned process with its own CUDA context, replaced after any failure.

    The device-graph path runs this way: on an H100 (CUDA 13.0, driver 580), one context that had built
    and destroyed a few dozen pools of device-launchable graphs began to refuse device-side launches
    (cudaErrorInvalidValue) and then faulted, taking every later measurement of the process with it.
    """

    def __init__(self, timeout: float = 300.0):
        self.timeout = timeout
        self._pool = None

    def call(self, fn, *args):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        if self._pool is None:
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        try:
            return self._pool.submit(fn, *args).result(timeout=self.timeout)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def winners(result: DmaResult) -> list[dict]:
    """Per direction, size and inflight: which path moved the bytes fastest, and the runner-up ratio."""
    out = []
    keys = sorted({(r.direction, r.bytes, r.inflight) for r in result.rows})
    for direction, nbytes, inflight in keys:
        best: dict[str, Row] = {}
        for r in result.rows:
            if (r.direction, r.bytes, r.inflight) == (direction, nbytes, inflight):
                if r.path not in best or r.gbps > best[r.path].gbps:
                    best[r.path] = r
        ranked = sorted(best.values(), key=lambda r: -r.gbps)
        out.append({"direction": direction, "bytes": nbytes, "inflight": inflight, "winner": ranked[0].path,
                    "latency_us": ranked[0].latency_us, "gbps": ranked[0].gbps,
                    "ranking": [(r.path, round(r.gbps, 3)) for r in ranked]})
    return out


def fastest(result: DmaResult, path: str, direction: str, nbytes: int) -> Row | None:
    """The lowest one-way latency a path reached (over engine configurations) for a direction and size."""
    rows = [r for r in result.rows if (r.path, r.direction, r.bytes, r.inflight) == (path, direction, nbytes, 1)]
    return min(rows, key=lambda r: r.latency_us) if rows else None


def baseline_ratios(result: DmaResult) -> list[dict]:
    """One-way latency of the CPU-controlled baseline over each GPU-driven path's, same direction and size."""
    out = []
    for path, direction, nbytes in sorted({(r.path, r.direction, r.bytes) for r in result.rows if r.inflight == 1}):
        base, r = fastest(result, "baseline", direction, nbytes), fastest(result, path, direction, nbytes)
        if path != "baseline" and base:
            out.append({"path": path, "direction": direction, "bytes": nbytes, "latency_us": r.latency_us,
                        "baseline_us": base.latency_us, "speedup": base.latency_us / r.latency_us})
    return out


def targets(result: DmaResult) -> list[dict]:
    """The issue's targets for the engine path, each with the measured value (best engine configuration)."""
    want = [("D2H 8 KiB one-way latency", "D2H", 8 * KiB, 1, "latency_us", "<=", 4.3),
            ("D2H 8 KiB throughput", "D2H", 8 * KiB, 64, "gbps", ">=", 10.0),
            ("D2H 64 KiB throughput", "D2H", 64 * KiB, 64, "gbps", ">=", 45.0),
            ("D2H 1 MiB throughput", "D2H", MiB, 64, "gbps", ">=", 52.0)]
    out = []
    for name, direction, nbytes, inflight, metric, op, goal in want:
        rows = [r for r in result.rows if (r.path, r.direction, r.bytes, r.inflight) == ("software", direction, nbytes,
                                                                                         inflight)]
        if not rows:
            continue
        pick = min if metric == "latency_us" else max
        row = pick(rows, key=lambda r: getattr(r, metric))
        value = getattr(row, metric)
        met = value <= goal if op == "<=" else value >= goal
        scattered = [r for r in rows if r.layout == "scattered"]
        out.append({"target": name, "goal": f"{op} {goal}", "measured": value, "met": met, "layout": row.layout,
                    "engine_streams": row.engine_streams,
                    "scattered": max((r.gbps for r in scattered), default=None) if metric == "gbps" else None})
    return out


def plot(result: DmaResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, thr) = plt.subplots(1, 2, figsize=(13, 5))
    styles = {"D2H": "-", "H2D": "--", "D2D": ":"}
    colors = {"software": "C0", "baseline": "C3", "prearmed": "C2", "devgraph": "C1"}
    top = max((r.inflight for r in result.rows), default=1)
    for p in colors:
        for d, ls in styles.items():
            # The best engine configuration (streams, layout) at each size.
            one, many = {}, {}
            for r in result.rows:
                if (r.path, r.direction) != (p, d):
                    continue
                if r.inflight == 1 and (r.bytes not in one or r.latency_us < one[r.bytes]):
                    one[r.bytes] = r.latency_us
                if r.inflight == top and (r.bytes not in many or r.gbps > many[r.bytes]):
                    many[r.bytes] = r.gbps
            for ax, points in ((lat, one), (thr, many)):
                if points:
                    sizes = sorted(points)
                    ax.plot(sizes, [points[s] for s in sizes], ls, color=colors[p], marker="o", label=f"{p} {d}")
    lat.set(xscale="log", yscale="log", xlabel="bytes per transfer", ylabel="us (median)",
            title="one-way latency, post to completion seen by the GPU")
    thr.set(xscale="log", yscale="log", xlabel="bytes per transfer", ylabel="GB/s",
            title=f"throughput, {top} in flight (best configuration)")
    for ax in (lat, thr):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.suptitle(f"arkdma bench dma on {result.device}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)

