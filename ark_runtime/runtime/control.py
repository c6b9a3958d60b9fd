"""The control block the host shares with the resident kernel (records.CONTROL_DTYPE: pinned host memory mapped for
the GPU): `go` (iterations asked for, in all) and `stop` written by the host or the host's go stream, `done` and the
fault record written by the kernel; waiting for `done` to reach a count; and how often the kernel publishes `done`
(ARK_PUBLISH_EVERY).

Waiting spins on the mapped `done` word without giving up the core for the first SPIN_S (a round trip is tens of
microseconds, and a sleep costs as much again in timer slack), then yields the core (sched_yield) until YIELD_S,
then sleeps, doubling from NAP_FIRST_S to NAP_MAX_S, so a long wait does not keep a core busy."""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable

import numpy as np

from ark_runtime.kernel.codes import RING
from ark_runtime.kernel.records import CONTROL_DTYPE
from ark_runtime.runtime.faults import LoopError

SPIN_S = 2e-3  # wait() polls `done` back to back this long
YIELD_S = 20e-3  # then gives up the core between polls (sched_yield) until this long
NAP_FIRST_S = 50e-6  # then sleeps between polls, doubling from this
NAP_MAX_S = 1e-3  # ... up to this

KERNEL_DEFINES_ENV = "ARK_KERNEL_DEFINES"  # names defined for an A/B of the kernel's own switches (ARK_NO_STOP_LOOK)
PUBLISH_EVERY_ENV = "ARK_PUBLISH_EVERY"  # N: the kernel publishes `done` every Nth iteration (default: every 16th)


class Waited(enum.Enum):
    """How a wait for `done` ended."""

    DONE = "done"  # `done` reached the count
    FAULT = "fault"  # the kernel recorded a fault first
    TIMEOUT = "timeout"  # neither within the timeout


def _word(buf: np.ndarray, field: str, dtype) -> np.ndarray:
    at = CONTROL_DTYPE.fields[field][1]
    size = np.dtype(dtype).itemsize
    return buf[at:at + size].view(dtype)


def _reader(word: np.ndarray) -> memoryview:
    """A memoryview of a one-word view: indexing it reads the memory as a Python int (several times quicker than a
    NumPy scalar read and compare, which is what a poll costs)."""
    return memoryview(word.view(np.uint8)).cast("B").cast("Q" if word.dtype.itemsize == 8 else "I")


class ControlBlock:
    """Views of one Control record over `buf` (CONTROL_DTYPE.itemsize bytes of pinned host memory mapped for the
    GPU, whose GPU address is `device_ptr`): `record` (the whole record), and one-element arrays for the words read
    or written on the host's hot path (`go`, `stop`, `done`, `fault`), made once: a poll reads the memory through
    them and builds no view."""

    def __init__(self, buf: np.ndarray, device_ptr: int, owner=None):
        if buf.dtype != np.uint8 or buf.nbytes != CONTROL_DTYPE.itemsize:
            raise LoopError(f"a control block is {CONTROL_DTYPE.itemsize} bytes (uint8), not {buf.nbytes} "
                            f"({buf.dtype})")
        self._owner = owner  # the memory, kept while the views live
        self.record = buf.view(CONTROL_DTYPE)
        self.go = _word(buf, "go", np.uint64)
        self.stop = _word(buf, "stop", np.uint64)
        self.done = _word(buf, "done", np.uint64)
        self.fault = _word(buf, "fault", np.uint32)
        self._done_reader, self._fault_reader = _reader(self.done), _reader(self.fault)
        self.device_ptr = device_ptr
        self.go_device_ptr = device_ptr + CONTROL_DTYPE.fields["go"][1]

    @classmethod
    def pinned(cls) -> ControlBlock:
        """A zeroed control block in new pinned host memory (CuPy's pinned pool), mapped for the GPU."""
        import cupy

        mem = cupy.cuda.alloc_pinned_memory(CONTROL_DTYPE.itemsize)
        buf = np.frombuffer(mem, np.uint8, CONTROL_DTYPE.itemsize)
        buf[:] = 0
        return cls(buf, cupy.cuda.runtime.pointerGetAttributes(mem.ptr).devicePointer, owner=mem)

    def iterations_done(self) -> int:
        return int(self.done[0])

    def faulted(self) -> bool:
        return int(self.fault[0]) != 0

    def wait_done(self, target: int, timeout: float, *, clock: Callable[[], float] = time.monotonic,
                  yield_core: Callable[[], None] = os.sched_yield,
                  sleep: Callable[[float], None] = time.sleep) -> Waited:
        """Until `done` reaches `target` (DONE), the kernel records a fault (FAULT) or `timeout` seconds pass
        (TIMEOUT); spins, then yields, then sleeps (the module's docstring). `clock`, `yield_core` and `sleep` are
        replaceable for tests."""
        done, fault = self._done_reader, self._fault_reader
        t0 = clock()
        spin_end, yield_end, deadline = t0 + SPIN_S, t0 + YIELD_S, t0 + timeout
        nap = NAP_FIRST_S
        while True:
            if done[0] >= target:
                return Waited.DONE
            if fault[0]:
                return Waited.FAULT
            t = clock()
            if t >= deadline:
                return Waited.DONE if done[0] >= target else Waited.TIMEOUT
            if t < spin_end:
                continue
            if t < yield_end:
                yield_core()
                continue
            sleep(min(nap, deadline - t))
            nap = min(nap * 2, NAP_MAX_S)


def publish_every_options() -> tuple[str, ...]:
    """The compile options that set how often the kernel publishes `done`: none (every 16th iteration, loop.cuh's
    default) unless ARK_PUBLISH_EVERY is set, then -DARK_PUBLISH_EVERY=N (1 <= N < RING); and the names in
    ARK_KERNEL_DEFINES, for an A/B of the kernel's own switches."""
    value = os.environ.get(PUBLISH_EVERY_ENV)
    extra = tuple(f"-D{d}" for d in os.environ.get(KERNEL_DEFINES_ENV, "").split() if d.isidentifier())
    if value is None or value == "":
        return extra
    try:
        n = int(value)
    except ValueError:
        n = 0
    if not 1 <= n < RING:
        raise LoopError(f"{PUBLISH_EVERY_ENV}={value!r}: give a whole number of iterations from 1 to {RING - 1} "
                        "(1 publishes every iteration; unset: every 16th)")
    return (f"-D{PUBLISH_EVERY_ENV}={n}", *extra)
