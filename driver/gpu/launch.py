"""Launching kernels that produce into GPU queues, with a bounded wait for them to finish.

A kernel that posts and waits is bounded by its queues' budgets; `finish()` bounds the host's wait
too: past its timeout it writes every queue's abort word, gives the kernel a moment to see it, and
raises instead of blocking forever on a stream that will not drain.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from driver.discovery import gpus
from driver.errors import ArkdmaError, EngineTimeout
from driver.gpu.queue import GpuQueue


def gpu_unavailable_reason() -> str | None:
    """None when CuPy reaches a CUDA GPU, else why not."""
    found, why = gpus()
    return None if found else why


def launch(fn, grid: int | tuple, block: int | tuple, args: tuple, stream=None):
    """Launch `fn` on `stream` (a new non-blocking stream by default); returns the stream."""
    import cupy

    stream = stream or cupy.cuda.Stream(non_blocking=True)
    grid = grid if isinstance(grid, tuple) else (grid,)
    block = block if isinstance(block, tuple) else (block,)
    with stream:
        fn(grid, block, args)
    return stream


def finish(stream, timeout: float, queues: Iterable[GpuQueue] = ()) -> float:
    """Wait for `stream` to drain, at most `timeout` seconds; returns the seconds waited.

    Past the timeout every queue in `queues` is aborted and EngineTimeout raised (after up to one
    more second for the kernel to notice; a kernel that ignores its abort words leaves the stream busy).
    """
    t0 = time.monotonic()
    nap = 1e-5
    while not stream.done:
        waited = time.monotonic() - t0
        if waited > timeout:
            queues = list(queues)
            for q in queues:
                q.abort()
            grace = time.monotonic() + 1.0
            while not stream.done and time.monotonic() < grace:
                time.sleep(1e-3)
            state = "stopped after the abort" if stream.done else "is still running"
            raise EngineTimeout(f"kernel still running after {timeout:.1f} s; aborted {len(queues)} queue(s): it {state}")
        time.sleep(nap)
        nap = min(nap * 2, 1e-3)
    stream.synchronize()  # raises the kernel's CUDA error, if any
    return time.monotonic() - t0


def require_gpu() -> None:
    reason = gpu_unavailable_reason()
    if reason:
        raise ArkdmaError(f"this needs a CUDA GPU: {reason}")


REGISTER_UNIT = 256  # registers are given to a warp in units of this many (compute capability 7.0 to 9.0)


def fit_together(props: dict, blocks: list[tuple[int, int, int]]) -> bool:
    """Whether one block of each kernel in `blocks` (threads, registers a thread, shared memory in bytes, static and
    dynamic) can be resident on one SM at once, from the device's properties (CuPy's getDeviceProperties): warps,
    registers in REGISTER_UNIT per warp, shared memory with the driver's reserve per block, and blocks."""
    warps = sum(-(-t // 32) for t, _, _ in blocks)
    registers = sum(-(-t // 32) * -(-(r * 32) // REGISTER_UNIT) * REGISTER_UNIT for t, r, _ in blocks)
    shared = sum(s + props.get("reservedSharedMemPerBlock", 1024) for _, _, s in blocks)
    return (warps * 32 <= props["maxThreadsPerMultiProcessor"] and registers <= props["regsPerMultiprocessor"]
            and shared <= props["sharedMemPerMultiprocessor"]
            and len(blocks) <= props.get("maxBlocksPerMultiProcessor", 16))
