"""The CPU-controlled baseline, the pre-armed stream chain and the device-graph path (bench/native/
cpu_free_paths.cu), built with nvcc on first use (cached by source hash) and called through ctypes."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from driver.errors import ArkdmaError

SOURCE = Path(__file__).with_name("native") / "cpu_free_paths.cu"
BUILD_DIR = SOURCE.parent / "build"
DIRECTIONS = {"D2H": 0, "H2D": 1, "D2D": 2}


class PathError(ArkdmaError):
    """A copy path could not be built or run; the message names the CUDA call and error."""


@dataclass(frozen=True)
class Samples:
    """Round trips timed on the GPU: ns per round trip (globaltimer), and where the path's kernel could
    time them, clock64 cycles per round trip with the span of the whole loop in both units."""

    ns: np.ndarray
    clk: np.ndarray | None = None
    span_ns: int = 0
    span_clk: int = 0


def build(arch: str = "sm_90") -> Path:
    """The shared library for `arch`, built with nvcc unless a build of this source is already there
    (needs nvcc, not a GPU)."""
    nvcc = shutil.which("nvcc")
    digest = hashlib.sha256(SOURCE.read_bytes() + arch.encode()).hexdigest()[:12]
    lib = BUILD_DIR / f"libarkdma_paths_{digest}.so"
    if not lib.exists():
        if nvcc is None:
            raise PathError("nvcc is not on PATH: the baseline, pre-armed and device-graph paths are built with it")
        BUILD_DIR.mkdir(exist_ok=True)
        tmp = lib.with_suffix(".tmp")
        run = subprocess.run(
            [nvcc, "-O2", "-std=c++17", f"-arch={arch}", "-rdc=true", "-shared", "-Xcompiler", "-fPIC",
             str(SOURCE), "-lcudadevrt", "-o", str(tmp)],
            capture_output=True, text=True, timeout=600,
        )
        if run.returncode:
            raise PathError(f"nvcc could not build {SOURCE.name}:\n{run.stderr}")
        tmp.rename(lib)
    return lib


@functools.cache
def library(arch: str = "sm_90") -> ctypes.CDLL:
    dll = ctypes.CDLL(str(build(arch)))
    u64p, i64p = ctypes.POINTER(ctypes.c_ulonglong), ctypes.POINTER(ctypes.c_longlong)
    dll.arkdma_paths_error.restype = ctypes.c_char_p
    dll.arkdma_paths_timer_resolution.argtypes = [u64p]
    dll.arkdma_paths_baseline.argtypes = [ctypes.c_int, ctypes.c_ulonglong, ctypes.c_int, ctypes.c_int, u64p]
    dll.arkdma_paths_stream_wait_geq64.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_ulonglong]
    for name in ("arkdma_paths_prearmed", "arkdma_paths_devgraph"):
        getattr(dll, name).argtypes = [ctypes.c_int, ctypes.c_ulonglong, ctypes.c_int, ctypes.c_int, ctypes.c_double,
                                       u64p, i64p]
    return dll


def _check(rc: int, what: str) -> None:
    if rc:
        raise PathError(f"{what}: {library().arkdma_paths_error().decode(errors='replace')}")


def _ptr(a: np.ndarray, ctype):
    return a.ctypes.data_as(ctypes.POINTER(ctype))


def timer_resolution_ns() -> int:
    """The smallest step the GPU's globaltimer takes, as seen by one thread."""
    out = ctypes.c_ulonglong(0)
    _check(library().arkdma_paths_timer_resolution(ctypes.byref(out)), "globaltimer probe")
    return out.value


def _check_args(direction: str, nbytes: int, inflight: int, iterations: int) -> int:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, not {direction!r}")
    if nbytes <= 0 or inflight <= 0 or iterations <= 0:
        raise ValueError(f"bytes, inflight and iterations must be positive (got {nbytes}, {inflight}, {iterations})")
    return DIRECTIONS[direction]


def baseline(direction: str, nbytes: int, inflight: int, iterations: int) -> Samples:
    """kernel; sync; `inflight` copies; sync; kernel: GPU time from the first kernel's end to the second's start."""
    d = _check_args(direction, nbytes, inflight, iterations)
    ns = np.zeros(iterations, np.uint64)
    _check(library().arkdma_paths_baseline(d, nbytes, inflight, iterations, _ptr(ns, ctypes.c_ulonglong)),
           f"baseline {direction} {nbytes} B")
    return Samples(ns)


def _timed(fn_name: str, what: str, direction: str, nbytes: int, inflight: int, iterations: int,
           budget_s: float) -> Samples:
    d = _check_args(direction, nbytes, inflight, iterations)
    ns = np.zeros(iterations + 2, np.uint64)
    clk = np.zeros(iterations, np.int64)
    _check(getattr(library(), fn_name)(d, nbytes, inflight, iterations, budget_s, _ptr(ns, ctypes.c_ulonglong),
                                       _ptr(clk, ctypes.c_longlong)), f"{what} {direction} {nbytes} B x{inflight}")
    return Samples(ns[:iterations], clk, int(ns[iterations]), int(ns[iterations + 1]))


def prearmed(direction: str, nbytes: int, inflight: int, iterations: int, budget_s: float = 1.0) -> Samples:
    """Copies queued ahead behind cuStreamWaitValue32; a GPU thread triggers each round and waits for it."""
    return _timed("arkdma_paths_prearmed", "pre-armed chain", direction, nbytes, inflight, iterations, budget_s)


def devgraph(direction: str, nbytes: int, inflight: int, iterations: int, budget_s: float = 1.0) -> Samples:
    """A GPU thread launches a device graph of `inflight` copies plus a completion token, and waits for it."""
    return _timed("arkdma_paths_devgraph", "device graph", direction, nbytes, inflight, iterations, budget_s)


def stream_wait_geq(stream_ptr: int, addr: int, value: int) -> None:
    """Make a CUDA stream wait (cuStreamWaitValue64, GEQ) until the 64-bit word at `addr` reaches `value`."""
    _check(library().arkdma_paths_stream_wait_geq64(stream_ptr, addr, value), "stream wait")
