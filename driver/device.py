"""The driver's user-facing objects: a Device (one engine, its regions, its queues) and HostQueue,
the CPU-side producer that posts descriptors the way the GPU-side header does."""

from __future__ import annotations

import time
from collections.abc import Iterable

import numpy as np

from driver.abi import COMPLETION_BYTES, COMPLETION_COUNT_MASK, COMPLETION_ERROR_BIT, Flag, Perm
from driver.backend import Backend, Buffer
from driver.descriptor import Descriptor
from driver.dtypes import DESCRIPTOR_DTYPE
from driver.errors import ArkdmaError, EngineTimeout, QueueError
from driver.regions import RegionHandle, RegionTable

COMPLETION_STRIDE = 64  # one completion word per cache line, so queues never share a line
MAX_WAIT_S = 7 * 24 * 3600.0


class Device:
    """One engine with its region table and queues. Owns the memory it allocates."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.geometry = backend.geometry
        self.regions = RegionTable(backend)
        self._completions: Buffer | None = None
        self._completion_region: RegionHandle | None = None
        self._queues: dict[int, HostQueue] = {}

    @property
    def name(self) -> str:
        return self.backend.name

    def alloc(self, size: int, placement: str = "host") -> Buffer:
        return self.backend.alloc(size, placement)

    def register(self, buffer: Buffer | None = None, **kwargs) -> RegionHandle:
        """Register engine memory as a region (see RegionTable.register; register_host and
        register_unsafe are on `regions`)."""
        return self.regions.register(buffer, **kwargs)

    def _completion_slot(self, queue: int) -> tuple[Buffer, RegionHandle, int]:
        if self._completion_region is None:
            size = self.geometry.num_queues * COMPLETION_STRIDE
            # This producer is a CPU thread, so its completion words live in host memory, where it polls
            # them without a copy (GPU producers put theirs in GPU memory: driver/gpu/queue.py).
            words = self.alloc(size, "host")
            words.write(0, bytes(size))
            # An id from the top, which no user registration gets and no host queue may name. Set both
            # only once it is registered: a refusal (an overlapping user region) leaves nothing half-made.
            region = self.regions.register_internal(words, Perm.WRITE)
            self._completions, self._completion_region = words, region
        return self._completions, self._completion_region, queue * COMPLETION_STRIDE

    def queue(self, queue: int | None = None, start: int = 0) -> "HostQueue":
        """Configure and enable a queue whose completion word lives in engine-reachable memory."""
        if queue is not None and (isinstance(queue, bool) or not isinstance(queue, int)):
            raise ArkdmaError(f"a queue id is an int, not {type(queue).__name__} {queue!r}")
        if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < 1 << 63:
            raise ArkdmaError(f"start must be an int in 0..2**63-1, not {start!r}")
        if queue is None:
            free = [q for q in range(self.geometry.num_queues) if q not in self._queues]
            if not free:
                raise ArkdmaError(f"all {self.geometry.num_queues} queues are in use; stop one first")
            queue = free[0]
        if queue in self._queues:
            raise ArkdmaError(f"queue {queue} is already open; stop() it first")
        if not 0 <= queue < self.geometry.num_queues:
            raise ArkdmaError(f"queue {queue} does not exist (0..{self.geometry.num_queues - 1})")
        buf, region, offset = self._completion_slot(queue)
        hq = HostQueue(self, queue, buf, region, offset, start)
        self._queues[queue] = hq
        return hq

    def _forget(self, queue: int) -> None:
        self._queues.pop(queue, None)

    def close(self) -> None:
        try:
            for hq in list(self._queues.values()):
                hq.stop()
        finally:
            self.regions.forget_all()
            self.backend.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class HostQueue:
    """Posts descriptors into one queue from the CPU: write slots, ring the doorbell, poll the counter.

    Flow control follows the ABI: at most SLOTS descriptors between the producer index and the
    completion word. Every wait is bounded and raises EngineTimeout instead of hanging.
    """

    def __init__(self, device: Device, queue: int, buffer: Buffer, region: RegionHandle, offset: int, start: int):
        self.device, self.id = device, queue
        self._backend = device.backend
        self._buffer, self._offset = buffer, offset
        self.slots = device.geometry.slots
        self.posted = start
        self.stopped = False
        self._backend.configure_queue(queue, region.id, offset, start)
        self._backend.enable_queue(queue)

    def completion_word(self) -> int:
        return int.from_bytes(self._buffer.read(self._offset, COMPLETION_BYTES), "little")

    @property
    def completed(self) -> int:
        return self.completion_word() & COMPLETION_COUNT_MASK

    def _raise_if_halted(self, word: int) -> None:
        if word >> COMPLETION_ERROR_BIT:
            st = self._backend.queue_state(self.id)
            raise QueueError(self.id, st.error, st.error_cookie, st.error_index)

    def post(self, descriptors: Descriptor | Iterable[Descriptor] | np.ndarray, timeout: float = 10.0) -> int:
        """Post descriptors (a Descriptor, an iterable of them, or a DESCRIPTOR_DTYPE array) and ring
        the doorbell; returns the ticket: the completion count at which the last one is done."""
        if isinstance(descriptors, Descriptor):
            raw = descriptors.pack()
        elif isinstance(descriptors, np.ndarray):
            if descriptors.dtype != DESCRIPTOR_DTYPE:
                raise ArkdmaError(
                    f"descriptor arrays must have dtype driver.dtypes.DESCRIPTOR_DTYPE, not {descriptors.dtype}; "
                    "build them with np.zeros(n, DESCRIPTOR_DTYPE)"
                )
            raw = np.ascontiguousarray(descriptors).tobytes()
        else:
            descriptors = list(descriptors)
            if not all(isinstance(d, Descriptor) for d in descriptors):
                raise ArkdmaError("post() takes Descriptors, an iterable of them, or a DESCRIPTOR_DTYPE array")
            raw = b"".join(d.pack() for d in descriptors)
        self._check_usable()
        self._refuse_internal(raw)
        count = len(raw) // 32
        done = 0
        while done < count:
            free = self.slots - (self.posted - self._wait_completed(self.posted - self.slots + 1, timeout))
            n = min(free, count - done)
            self._backend.write_slots(self.id, self.posted, raw[done * 32 : (done + n) * 32])
            self.posted += n
            done += n
            self._backend.ring(self.id, self.posted)
        return self.posted

    def _check_usable(self) -> None:
        if self.stopped:
            raise ArkdmaError(f"queue {self.id} was stopped; open it again with device.queue({self.id})")

    def _refuse_internal(self, raw: bytes) -> None:
        """No descriptor from the host may name the device's own regions (its completion words)."""
        internal = self.device.regions.internal_ids
        if not internal or not raw:
            return
        table = np.frombuffer(raw, DESCRIPTOR_DTYPE)
        ids = np.fromiter(internal, np.int64)
        dst = np.isin(table["dst_region"], ids)
        src = np.isin(table["src_region"], ids) & ((table["flags"] & int(Flag.IMM)) == 0)  # IMM has no source
        bad = np.flatnonzero(dst | src)
        if bad.size:
            k = int(bad[0])
            region = int(table["dst_region"][k] if dst[k] else table["src_region"][k])
            raise ArkdmaError(
                f"descriptor {k} of this post names region {region}, which holds the device's completion words; "
                "name a region you registered"
            )

    def _wait_completed(self, ticket: int, timeout: float) -> int:
        """Wait until the completion word reaches `ticket`; return the completed count."""
        deadline = time.monotonic() + timeout
        spins = 0
        while True:
            word = self.completion_word()
            self._raise_if_halted(word)
            completed = word & COMPLETION_COUNT_MASK
            if completed >= ticket:
                return completed
            self._backend.advance(ticket - completed)
            spins += 1
            if spins > 64:
                if time.monotonic() > deadline:
                    raise EngineTimeout(
                        f"queue {self.id} on {self._backend.name}: completion stayed at {completed}, "
                        f"waited {timeout:.1f} s for {ticket}; is the engine running?"
                    )
                time.sleep(0 if spins < 1000 else 1e-4)

    def wait(self, ticket: int | None = None, timeout: float = 10.0) -> int:
        """Block until descriptor `ticket` (default: everything posted) has completed."""
        self._check_usable()
        if ticket is not None and (isinstance(ticket, bool) or not isinstance(ticket, int)):
            raise ArkdmaError(f"a ticket is an int (what post() returned), not {ticket!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout <= MAX_WAIT_S:
            raise ArkdmaError(f"timeout must be 0..{MAX_WAIT_S:.0f} seconds, not {timeout!r}")
        return self._wait_completed(self.posted if ticket is None else ticket, timeout)

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        try:
            self._backend.disable_queue(self.id)
        finally:
            self.device._forget(self.id)
