"""Queues whose producer is GPU code: the engine-side set-up, the producer state, the host-visible status
record, and the trivially copyable device handle (device.cuh's arkdma_queue) kernels take by value.

The engine must expose GPU-writable queue memory through `backend.queue_pointers(q)` (the software
engine's CUDA executor and the card do). The completion words of a Device's GPU queues share one
block of engine-reachable memory (one region), one 64-byte line per queue.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

import numpy as np

from driver.abi import COMPLETION_COUNT_MASK, COMPLETION_ERROR_BIT, Perm
from driver.backend import NotGpuReachable
from driver.device import COMPLETION_STRIDE, Device
from driver.errors import ArkdmaError, EngineTimeout
from driver.abi import DeviceCode, Site
from driver.dtypes import PRODUCER_DTYPE, QUEUE_DTYPE, STATUS_DTYPE
from driver.regions import RegionHandle

DEFAULT_BUDGET_S = 1.0


class GpuQueueError(ArkdmaError):
    """A GPU queue could not be set up; the message says why and what to do."""


@dataclass(frozen=True)
class DeviceStatus:
    """A queue's status record as the GPU left it."""

    code: DeviceCode
    site: Site
    queue: int
    expected: int
    observed: int
    waited_ns: int
    failures: int

    @property
    def ok(self) -> bool:
        return self.code == DeviceCode.OK

    def describe(self) -> str:
        if self.ok:
            return "no failure"
        word = self.observed
        seen = f"{word & COMPLETION_COUNT_MASK}" + (" with the error bit" if word >> COMPLETION_ERROR_BIT else "")
        what = {Site.POST: "waiting for room to post", Site.WAIT: "waiting for ticket",
                Site.SIGNAL: "waiting for the flag to reach"}.get(self.site, "at an unknown site")
        return (f"queue {self.queue}: {self.code.name} {what} {self.expected} after {self.waited_ns / 1e6:.3f} ms "
                f"(last read {seen}); {self.failures} failure(s) in all")


def _reachable(call, arg):
    try:
        return call(arg)
    except NotGpuReachable as exc:
        raise GpuQueueError(str(exc)) from None


class _CompletionBlock:
    """One engine-reachable block holding the completion words of a Device's GPU queues."""

    def __init__(self, device: Device):
        backend = device.backend
        size = backend.geometry.num_queues * COMPLETION_STRIDE
        self.buffer = backend.alloc(size, backend.completion_placement)
        self.buffer.write(0, bytes(size))
        self.region: RegionHandle = device.regions.register_internal(self.buffer, Perm.WRITE)
        self.gpu_ptr = _reachable(backend.gpu_address, self.buffer)


_blocks: "weakref.WeakKeyDictionary[Device, _CompletionBlock]" = weakref.WeakKeyDictionary()


class GpuQueue:
    """One queue, configured and enabled, with what a GPU producer needs. `handle()` is the kernel argument.

    `budget_s` bounds every wait the GPU code makes on this queue. `close()` disables the queue.
    """

    def __init__(self, device: Device, queue: int, *, start: int = 0, budget_s: float = DEFAULT_BUDGET_S):
        import cupy

        backend = device.backend
        if not 0 <= queue < backend.geometry.num_queues:
            raise GpuQueueError(f"queue {queue} does not exist (0..{backend.geometry.num_queues - 1})")
        if not 0 <= start <= COMPLETION_COUNT_MASK:
            raise GpuQueueError(f"start index {start} is not a 63-bit count")
        if not 0 < budget_s < 3600:
            raise GpuQueueError(f"budget_s must be in (0, 3600) seconds, not {budget_s}")
        pointers = _reachable(backend.queue_pointers, queue)
        if not pointers.window_device or not pointers.doorbell_device:
            raise GpuQueueError(f"engine {backend.name}'s queue {queue} is not mapped for the GPU (no device pointers)")
        self.device, self.id, self.slots = device, queue, pointers.slots
        self.budget_ns = int(budget_s * 1e9)
        block = _blocks.get(device)
        if block is None:
            block = _blocks[device] = _CompletionBlock(device)
        self._block = block
        self._offset = queue * COMPLETION_STRIDE
        self._producer = cupy.zeros(PRODUCER_DTYPE.itemsize, dtype=cupy.uint8)
        self._status_mem = cupy.cuda.alloc_pinned_memory(STATUS_DTYPE.itemsize)
        self._status = np.frombuffer(self._status_mem, dtype=STATUS_DTYPE, count=1)
        self._window, self._doorbell = pointers.window_device, pointers.doorbell_device
        self._open = False
        self.restart(start)

    # --- engine side ------------------------------------------------------------------------
    def restart(self, start: int) -> None:
        """(Re)enable the queue at producer index `start`, with fresh producer state and status record."""
        backend = self.device.backend
        if self._open:
            backend.disable_queue(self.id)
        self.start = start
        state = np.zeros(1, PRODUCER_DTYPE)
        state["posted"] = state["completed"] = start
        self._producer.set(state.view(np.uint8))
        self.clear_status()
        backend.configure_queue(self.id, self._block.region.id, self._offset, start)
        backend.enable_queue(self.id)
        self._open = True
        # Enable writes START into the completion word, maybe asynchronously (the CUDA executor enqueues
        # it): GPU code launched before it lands would read the old count.
        deadline = time.monotonic() + 5.0
        while self.completion_word() != start:
            if time.monotonic() > deadline:
                raise EngineTimeout(f"queue {self.id}: the completion word did not read START={start} after enable "
                                    f"(reads {self.completion_word():#x}); is the engine running?")
            time.sleep(1e-4)

    def close(self) -> None:
        if self._open:
            self.device.backend.disable_queue(self.id)
            self._open = False

    # --- what the GPU gets ------------------------------------------------------------------
    def handle(self) -> np.ndarray:
        """The device handle (a one-element structured array CuPy passes to a kernel by value)."""
        h = np.zeros(1, QUEUE_DTYPE)
        h["window"], h["doorbell"] = self._window, self._doorbell
        h["completion"] = self._block.gpu_ptr + self._offset
        h["producer"] = self._producer.data.ptr
        h["status"] = self._status_ptr()
        h["budget_ns"], h["slots"], h["id"] = self.budget_ns, self.slots, self.id
        return h

    def _status_ptr(self) -> int:
        # Pinned memory is mapped at the same address on the GPU (unified addressing); ask CUDA to be sure.
        from cupy.cuda import runtime

        return runtime.pointerGetAttributes(self._status_mem.ptr).devicePointer

    # --- observation -------------------------------------------------------------------------
    def completion_word(self) -> int:
        return int.from_bytes(self._block.buffer.read(self._offset, 8), "little")

    @property
    def completed(self) -> int:
        return self.completion_word() & COMPLETION_COUNT_MASK

    def producer(self) -> tuple[int, int]:
        """(posted, completed as the producer last read it), from GPU memory."""
        s = self._producer.get().view(PRODUCER_DTYPE)[0]
        return int(s["posted"]), int(s["completed"])

    def status(self) -> DeviceStatus:
        s = self._status[0]
        return DeviceStatus(DeviceCode(int(s["code"])), Site(int(s["site"])), int(s["queue"]), int(s["expected"]),
                            int(s["observed"]), int(s["waited_ns"]), int(s["failures"]))

    def clear_status(self) -> None:
        self._status[0] = np.zeros((), STATUS_DTYPE)
        state = self._producer.get().view(PRODUCER_DTYPE)
        state["claim"] = 0
        self._producer.set(state.view(np.uint8))

    def abort(self) -> None:
        """Make every wait of GPU code on this queue return ABORTED (within ~20 us)."""
        self._status["abort"] = 1

    def wait(self, ticket: int, timeout: float = 10.0) -> int:
        """Host-side wait on the completion word (for tests and tools); returns the completed count."""
        deadline = time.monotonic() + timeout
        while True:
            word = self.completion_word()
            if (word & COMPLETION_COUNT_MASK) >= ticket:
                return word & COMPLETION_COUNT_MASK
            if word >> COMPLETION_ERROR_BIT:
                st = self.device.backend.queue_state(self.id)
                raise ArkdmaError(f"queue {self.id} halted with {st.error.name} at index {st.error_index}")
            if time.monotonic() > deadline:
                raise EngineTimeout(f"queue {self.id}: completion stayed at {word & COMPLETION_COUNT_MASK}, "
                                    f"waited {timeout:.1f} s for {ticket}")
            time.sleep(1e-4)


def open_gpu_queues(device: Device, count: int, **kwargs) -> list[GpuQueue]:
    """`count` GPU queues on the lowest free queue ids."""
    n = device.geometry.num_queues
    if not 0 < count <= n:
        raise GpuQueueError(f"asked for {count} GPU queues; engine {device.name} has {n}")
    return [GpuQueue(device, q, **kwargs) for q in range(count)]


def handles(queues: list[GpuQueue]):
    """The handles of several queues as one GPU array (arkdma_queue[count]) for kernels that index them."""
    import cupy

    host = np.concatenate([q.handle() for q in queues])
    return cupy.asarray(host.view(np.uint8))
