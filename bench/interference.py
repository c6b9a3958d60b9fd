"""`arkdma bench interference`: how much engine transfers slow a bf16 matmul loop, beside an SM copy kernel.

For each transfer kind: the matmul loop alone (T_compute), the transfer alone (T_comm, its size chosen
so T_comm is close to T_compute), then both at once on two streams (T_concurrent, the later end).
% of ideal = (T_serial - T_concurrent) / (T_serial - max(T_compute, T_comm)) x 100, T_serial = sum of both:
100 when the two overlap perfectly, 0 when running them together saves nothing. Times are CUDA events,
medians of `repeats`.

Kinds: "engine <dir>": one GPU thread posts every descriptor (8 MiB or more each) through device.cuh into
the software engine and exits; the stream then waits for the completion word with cuStreamWaitValue64, so
no SM spins while the copy engines work (same-GPU D2D copies run on SMs in this CUDA version);
"engine-spin <dir>": the same bytes with the posting CTA staying resident, keeping 64 descriptors in
flight and spinning on the completion word (what a loop kernel's communicating CTA does); "sm-copy
<dir>": a copy kernel of `sm_copy_ctas` CTAs moving the same bytes (through mapped host memory for
D2H/H2D); "... P2P" (two GPUs only): GPU 0 to GPU 1 memory.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bench import native_paths
from bench.dma import KERNELS, SLOTS
from driver.abi import Perm
from driver.errors import EngineTimeout
from driver.abi import DeviceCode

KiB, MiB = 1024, 1 << 20
SPAN = 256 * MiB  # transfers rotate over this many bytes
MIN_CHUNK = 8 * MiB  # bytes per engine descriptor, at least


@dataclass(frozen=True)
class InterferenceConfig:
    matmul_n: int = 8192
    matmuls: int = 20
    repeats: int = 3
    sm_copy_ctas: int = 32
    engine_streams: int = 1
    directions: tuple[str, ...] = ("D2H", "H2D", "D2D")
    budget_s: float = 5.0


@dataclass(frozen=True)
class KindResult:
    kind: str
    path: str  # "engine", "engine-spin" or "sm-copy"
    direction: str
    bytes: int
    t_compute_ms: float
    t_comm_ms: float
    t_concurrent_ms: float
    t_matmul_concurrent_ms: float
    t_comm_concurrent_ms: float
    matmul_slowdown_pct: float
    gbps_alone: float
    gbps_concurrent: float
    pct_of_ideal: float


@dataclass
class InterferenceResult:
    device: str
    config: dict
    matmul: str  # what ran the matmul loop
    tflops_alone: float
    kinds: list[KindResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"device": self.device, "config": self.config, "matmul": self.matmul, "tflops_alone": self.tflops_alone,
                "kinds": [asdict(k) for k in self.kinds],
                "pct_of_ideal": {k.kind: k.pct_of_ideal for k in self.kinds}, "notes": self.notes}


def pct_of_ideal(t_compute: float, t_comm: float, t_concurrent: float) -> float:
    serial = t_compute + t_comm
    ideal_gain = serial - max(t_compute, t_comm)
    if ideal_gain <= 0:
        raise ValueError("T_serial equals max(T_compute, T_comm): no overlap is possible")
    return (serial - t_concurrent) / ideal_gain * 100


class Matmul:
    """A loop of bf16 n x n x n matmuls on a given CUDA stream (PyTorch; CuPy fp16 when PyTorch is absent)."""

    def __init__(self, n: int, count: int):
        self.n, self.count = n, count
        try:
            import torch

            g = torch.Generator(device="cuda").manual_seed(0)
            self.a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
            self.b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
            self.c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
            self.torch = torch
            self.name = f"torch.matmul bf16 {n}^3"
        except ImportError:
            import cupy

            rng = cupy.random.default_rng(0)
            self.a = rng.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
            self.b = rng.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
            self.c = cupy.empty((n, n), cupy.float16)
            self.torch = None
            self.name = f"cupy.matmul fp16 {n}^3 (PyTorch not installed: no bf16)"

    def enqueue(self, stream) -> None:
        if self.torch is not None:
            with self.torch.cuda.stream(self.torch.cuda.ExternalStream(stream.ptr)):
                for _ in range(self.count):
                    self.torch.matmul(self.a, self.b, out=self.c)
        else:
            import cupy

            with stream:
                for _ in range(self.count):
                    cupy.matmul(self.a, self.b, out=self.c)

    def flops(self) -> float:
        return 2.0 * self.n**3 * self.count


class Transfers:
    """The transfer kinds, each able to enqueue `nbytes` of copying on a stream."""

    def __init__(self, config: InterferenceConfig):
        import cupy

        from driver.device import Device
        from driver.gpu import compile
        from driver.gpu.arrays import enable_peer_access, register_array
        from driver.gpu.queue import GpuQueue
        from host.engine import SoftwareEngine

        self.cupy, self.config = cupy, config
        self.engine = SoftwareEngine("cuda", num_queues=1, slots=SLOTS, num_regions=8,
                                     streams_per_queue=config.engine_streams, cpus="auto")
        self.device = Device(self.engine)
        self.gpu = {name: cupy.full(SPAN, i + 1, dtype=cupy.uint8) for i, name in enumerate(("device", "device2"))}
        self.host = cupy.cuda.alloc_pinned_memory(SPAN)
        self.host_ptr = self.host.ptr  # pinned memory is mapped at the same address for the GPU
        self.ptrs = {"device": self.gpu["device"].data.ptr, "device2": self.gpu["device2"].data.ptr,
                     "host": self.host_ptr}
        self.regions = {name: register_array(self.device, arr) for name, arr in self.gpu.items()}
        # Pinned memory from CuPy is not the engine's: vouch for it and keep its owner alive with the region.
        self.regions["host"] = self.device.regions.register_unsafe(self.host_ptr, SPAN, perms=Perm.READ | Perm.WRITE,
                                                                   keep=self.host)
        self.peer = None
        if cupy.cuda.runtime.getDeviceCount() > 1:
            with cupy.cuda.Device(1):
                self.peer = cupy.zeros(SPAN, dtype=cupy.uint8)
            enable_peer_access(0, 1)
            self.regions["peer"] = register_array(self.device, self.peer)
            self.ptrs["peer"] = self.peer.data.ptr
        self.queue = GpuQueue(self.device, 0, budget_s=config.budget_s)
        self.completion_ptr = int(self.queue.handle()["completion"][0])
        self.ticket = self.queue.start
        module = compile.load(KERNELS)
        self.throughput_fn = module.get_function("throughput")
        self.post_all_fn = module.get_function("post_all")
        self.sm_copy_fn = module.get_function("sm_copy")
        self.result = cupy.zeros(5, cupy.uint64)

    def kinds(self) -> list[tuple[str, str, str]]:
        """(kind, path, direction) for every transfer this machine can run."""
        dirs = list(self.config.directions) + (["P2P"] if self.peer is not None else [])
        return [(f"{path} {d}", path, d) for path in ("engine", "engine-spin", "sm-copy") for d in dirs]

    @staticmethod
    def places(direction: str) -> tuple[str, str]:
        return {"D2H": ("device", "host"), "H2D": ("host", "device"), "D2D": ("device", "device2"),
                "P2P": ("device", "peer")}[direction]

    @staticmethod
    def chunk(nbytes: int) -> int:
        """Descriptor size: every descriptor of a transfer fits the window at once."""
        c = MIN_CHUNK
        while c * SLOTS < nbytes and c < SPAN // 2:
            c *= 2
        return c

    def bytes_for(self, path: str, nbytes: int) -> int:
        """The bytes enqueue() really moves for a request of `nbytes`."""
        if path == "sm-copy":
            return max(1, nbytes // SPAN) * SPAN
        c = self.chunk(nbytes)
        return max(1, min(SLOTS, nbytes // c)) * c

    def enqueue(self, path: str, direction: str, nbytes: int, stream) -> None:
        src, dst = self.places(direction)
        if path == "sm-copy":
            with stream:
                self.sm_copy_fn((self.config.sm_copy_ctas,), (256,),
                                (np.uint64(self.ptrs[src]), np.uint64(self.ptrs[dst]), np.uint64(SPAN // 16),
                                 np.uint32(max(1, nbytes // SPAN))))
            return
        chunk = self.chunk(nbytes)
        count = max(1, min(SLOTS, nbytes // chunk))
        regions = (self.queue.handle(), np.uint16(self.regions[src].id), np.uint16(self.regions[dst].id),
                   np.uint32(chunk))
        with stream:
            if path == "engine":
                self.post_all_fn((1,), (32,), (*regions, np.uint64(SPAN), np.uint32(count), self.result))
            else:
                self.throughput_fn((1,), (32,), (*regions, np.uint64(chunk), np.uint64(SPAN), np.uint32(count),
                                                 np.uint32(64), np.uint32(16), self.result))
        self.ticket += count
        if path == "engine":
            native_paths.stream_wait_geq(stream.ptr, self.completion_ptr, self.ticket)

    def check(self, path: str) -> None:
        if path != "sm-copy":
            code = int(self.result.get()[0])
            if DeviceCode(code) != DeviceCode.OK:
                raise RuntimeError(f"engine transfer failed: {self.queue.status().describe()}")

    def release(self) -> None:
        """Let a stream stuck waiting for the completion word go (the engine failed): write the ticket there."""
        value = np.array([self.ticket], np.uint64)
        self.cupy.cuda.runtime.memcpy(self.completion_ptr, value.ctypes.data, 8,
                                      self.cupy.cuda.runtime.memcpyHostToDevice)

    def close(self) -> None:
        self.queue.close()
        self.device.close()


def _elapsed_ms(start, end) -> float:
    import cupy

    return cupy.cuda.get_elapsed_time(start, end)


def run(config: InterferenceConfig, progress=None) -> InterferenceResult:
    import cupy

    tick = progress or (lambda what: None)
    props = cupy.cuda.runtime.getDeviceProperties(0)
    mm = Matmul(config.matmul_n, config.matmuls)
    tx = Transfers(config)
    a, b = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)

    def timed(enqueue_a=None, enqueue_b=None) -> tuple[float, float]:
        e0, ea, eb = cupy.cuda.Event(), cupy.cuda.Event(), cupy.cuda.Event()
        e0.record(a)
        b.wait_event(e0)
        if enqueue_a:
            enqueue_a(a)
        if enqueue_b:
            enqueue_b(b)
        ea.record(a)
        eb.record(b)
        deadline = time.monotonic() + 60
        while not (ea.done and eb.done):
            if time.monotonic() > deadline:
                tx.release()
                raise EngineTimeout(f"transfers did not finish within 60 s: {tx.queue.status().describe()}; "
                                    f"engine note: {tx.engine.note() or 'none'}")
            time.sleep(1e-4)
        return _elapsed_ms(e0, ea), _elapsed_ms(e0, eb)

    try:
        tick("matmul alone")
        timed(mm.enqueue)  # warm-up (cuBLAS handles, clocks)
        t_alone = statistics.median(timed(mm.enqueue)[0] for _ in range(config.repeats))
        result = InterferenceResult(props["name"].decode(), asdict(config), mm.name, mm.flops() / t_alone / 1e9)
        for kind, path, direction in tx.kinds():
            tick(kind)
            # Size the transfer so that alone it takes about as long as the matmul loop.
            probe = tx.bytes_for(path, 512 * MiB)
            for _ in range(2):  # the first transfer of a kind pays one-time set-up: size from the second
                t_probe = timed(enqueue_b=lambda s: tx.enqueue(path, direction, probe, s))[1]
                tx.check(path)
            nbytes = tx.bytes_for(path, int(probe * t_alone / t_probe))
            compute, comm, conc = [], [], []
            for _ in range(config.repeats):  # interleaved, so clock drift under load hits all three alike
                compute.append(timed(mm.enqueue)[0])
                comm.append(timed(enqueue_b=lambda s: tx.enqueue(path, direction, nbytes, s))[1])
                tx.check(path)
                conc.append(timed(mm.enqueue, lambda s: tx.enqueue(path, direction, nbytes, s)))
                tx.check(path)
            t_compute = statistics.median(compute)
            t_comm = statistics.median(comm)
            mm_conc = statistics.median(c[0] for c in conc)
            comm_conc = statistics.median(c[1] for c in conc)
            t_conc = statistics.median(max(c) for c in conc)
            result.kinds.append(KindResult(
                kind, path, direction, nbytes, t_compute, t_comm, t_conc, mm_conc, comm_conc,
                (mm_conc / t_compute - 1) * 100, nbytes / t_comm / 1e6, nbytes / comm_conc / 1e6,
                pct_of_ideal(t_compute, t_comm, t_conc)))
        return result
    finally:
        tx.close()


def plot(result: InterferenceResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k.kind for k in result.kinds]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    ax1.bar(kinds, [k.pct_of_ideal for k in result.kinds], color=["C0" if k.path == "engine" else "C3" for k in result.kinds])
    ax1.axhline(95, color="k", ls="--", lw=0.8)
    ax1.set(ylabel="% of ideal overlap", title="overlap with a bf16 matmul loop")
    ax2.bar(kinds, [k.matmul_slowdown_pct for k in result.kinds], color=["C0" if k.path == "engine" else "C3" for k in result.kinds])
    ax2.set(ylabel="matmul slowdown, %", title="matmul slowdown while transferring")
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", rotation=45)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"arkdma bench interference on {result.device} ({result.matmul})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
