"""The loop kernel as the host holds it while it may run: its stream, the memory it reads and writes (kept alive
until it has left), how to launch it (again, for Runtime.suspend()), and halting it: asked to leave through the
control block's `stop`, then a bounded wait for its stream.

Halting never waits for queued iterations (stop() drains them first when asked to). A Runtime collected while its
kernel runs, and every kernel still resident at interpreter exit, is halted within INTERRUPT_GRACE_S: at exit before
CuPy's and PyTorch's own handlers (which free memory, and cudaFree waits for the whole device); a kernel that does
not leave by then is left to the CUDA context's teardown, and the process exits without waiting."""

from __future__ import annotations

import atexit
import os
import sys
import time
from collections.abc import Callable

from ark_runtime.kernel.codes import RING
from ark_runtime.runtime.control import ControlBlock

STOP_GRACE_S = 5.0  # stop(), a fault, a timeout: how long the kernel may take to leave before it is an error
INTERRUPT_GRACE_S = 0.5  # Ctrl-C, exit, a collected Runtime: how long the host waits for the kernel to leave
OPEN_GATES_AFTER_S = 0.2  # a graph-copy kernel still busy this long after its stop: the host opens its gates
# The `finished` array's words after the RING slots (loop.cuh): iterations published, then go and stop as CTA 0
# last forwarded them, then the iteration a launch goes on from.
PUBLISHED, GO_SEEN, STOP_SEEN, SEGMENT_AT = RING, RING + 1, RING + 2, RING + 3
EXIT_CODE_STUCK = 70  # the exit status when a kernel would not leave at exit (os._exit: no CUDA teardown wait)

_RESIDENT: set[ResidentKernel] = set()  # kernels launched and not yet seen to leave


class ResidentKernel:
    """One launched loop kernel. `start()` queues it on `stream` (a cooperative launch, or a launch of the graph
    it runs in); `keep` is everything its arguments point at (GPU arrays, bound tensors, the DMA engine's queue),
    held until it has left; `finished` is its CuPy array of finished words; `open_gates()`, for graph copies
    launched ahead, opens gates the kernel left shut."""

    def __init__(self, name: str, control: ControlBlock, stream, start: Callable[[], None], finished,
                 keep: list, open_gates: Callable[[], object] | None = None):
        self.name = name
        self.control = control
        self.stream = stream
        self._start = start
        self._finished = finished
        self._keep = keep
        self._open_gates = open_gates

    @property
    def resident(self) -> bool:
        return self in _RESIDENT

    def launch(self) -> None:
        """Queues the kernel; it is resident (halted at exit) from now on."""
        _keep_exit_handler_last()
        _RESIDENT.add(self)
        try:
            self._start()
        except BaseException:
            _RESIDENT.discard(self)
            raise

    def relaunch(self, iteration: int) -> None:
        """Launches the kernel again after it left (halted, not faulted), to go on from `iteration` with the same
        memory, plan and counters (counters only grow, so nothing is reset): the stop words are cleared, and the
        kernel reads where to start from `finished[SEGMENT_AT]`, as a relaunch of its graph does."""
        words = self._finished.get(stream=self.stream)
        words[STOP_SEEN] = 0
        words[SEGMENT_AT] = iteration
        self._finished.set(words, stream=self.stream)
        self.stream.synchronize()
        self.control.stop[0] = 0
        self.launch()

    def halt(self, grace_s: float) -> bool:
        """Asks the kernel to leave (at once: queued iterations are dropped) and waits up to `grace_s` for its
        stream; True once it has left (then no longer resident), False if it is still running. Raises the CUDA error
        the kernel's stream reports, if any."""
        from cupy.cuda.runtime import CUDARuntimeError

        self.control.stop[0] = 1
        if not self.resident:
            return True
        begun = time.monotonic()
        opened = self._open_gates is None
        nap = 1e-5
        try:
            while not self.stream.done:
                waited = time.monotonic() - begun
                if not opened and waited > OPEN_GATES_AFTER_S:
                    opened = True
                    self._open_gates()
                if waited > grace_s:
                    return False
                time.sleep(nap)
                nap = min(nap * 2, 1e-3)
            self.stream.synchronize()
        except CUDARuntimeError:  # the context is lost: the kernel has ended with it
            _RESIDENT.discard(self)
            raise
        _RESIDENT.discard(self)
        return True

    def halt_quietly(self, grace_s: float = INTERRUPT_GRACE_S) -> bool:
        """halt(), for the paths that must not raise (an interrupt already on its way, exit, a collected Runtime):
        any error is taken as the kernel being unreachable, and its memory stays held."""
        try:
            return self.halt(grace_s)
        except Exception:  # noqa: BLE001 - a CUDA error here leaves nothing to do; the caller's error goes on
            return False


def others_resident(kernel: ResidentKernel | None = None) -> list[ResidentKernel]:
    """The resident kernels other than `kernel`."""
    return [k for k in _RESIDENT if k is not kernel]


def halt_all_at_exit(exit_now: Callable[[int], None] = os._exit) -> None:
    """At interpreter exit: halts every resident kernel without waiting for queued iterations. One that does not
    leave within INTERRUPT_GRACE_S would keep the CUDA teardown (and so the process) waiting: the process then exits
    at once, with EXIT_CODE_STUCK, its output flushed."""
    stuck = [k.name for k in list(_RESIDENT) if not k.halt_quietly(INTERRUPT_GRACE_S)]
    if stuck:
        print(f"arkdma: the loop kernel of {', '.join(stuck)} did not leave within {INTERRUPT_GRACE_S} s of being "
              "stopped at exit; exiting without waiting for it (the CUDA context's teardown ends it)",
              file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - exiting regardless
                pass
        exit_now(EXIT_CODE_STUCK)


def _keep_exit_handler_last() -> None:
    """Registers halt_all_at_exit to run before every exit handler registered so far (atexit runs the last
    registered first): CuPy's and PyTorch's, which free memory, and freeing waits for a resident kernel."""
    atexit.unregister(halt_all_at_exit)
    atexit.register(halt_all_at_exit)

