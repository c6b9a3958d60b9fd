"""The reference engine: the ABI executed exactly, in Python, one descriptor at a time.

This is the executable specification. Every other engine is compared with it byte for
byte by the conformance suite. It never runs on its own: `step()` executes one
descriptor, so tests decide exactly how far it has got (for reset-in-flight scenarios).

The rules it encodes (docs/abi.md repeats them for people):
- A doorbell write extends the producer index modulo 2**32. Moving it backwards is
  DOORBELL_BACKWARDS; more than SLOTS ahead of the completed count is RING_OVERFLOW. Either
  way the write is ignored, the descriptors posted before it still run, then the queue halts.
- A descriptor is validated in the ErrorCode order before any byte moves; the first failure
  halts the queue with completion word = (index of the failing descriptor) | error bit.
- The completion word is written after every NOTIFY descriptor, whenever the queue runs
  dry (completed == posted), on a halt, on enable (the start index) and on disable.
- Disabling a queue drops descriptors that have not started; a halted queue restarts only
  through disable and enable.
- The error log keeps the oldest entries: one that finds it full is dropped and sets the
  overflow flag, which only clear_errlog_overflow() (STATUS.ERRLOG_OVERFLOW written 1) and a
  reset clear; popping the log leaves it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from driver.abi import (
    COMPLETION_BYTES,
    DESCRIPTOR_BYTES,
    DOORBELL_BITS,
    FLAGS_VALID,
    IMM_BYTES,
    Capability,
    ErrorCode,
    Flag,
    Perm,
    check_geometry,
)
from driver.backend import (
    PLACEMENTS,
    Backend,
    Buffer,
    Counters,
    ErrorLogEntry,
    Geometry,
    QueueState,
    check_size,
    completion_word,
)
from driver.descriptor import Descriptor
from driver.errors import ArkdmaError
from driver.memory import BusMemory, MemoryFault

DOORBELL_MASK = (1 << DOORBELL_BITS) - 1


@dataclass(frozen=True)
class Region:
    addr: int
    size: int
    perms: int


def validate(desc: Descriptor, regions: list[Region | None]) -> ErrorCode:
    """The checks every engine makes before a byte moves, in ErrorCode order."""
    if desc.flags & ~FLAGS_VALID or desc.reserved:
        return ErrorCode.INVALID_DESCRIPTOR
    imm = bool(desc.flags & Flag.IMM)
    if imm and desc.length != IMM_BYTES:
        return ErrorCode.BAD_LENGTH

    def lookup(rid: int) -> Region | None:
        return regions[rid] if rid < len(regions) else None

    src = None if imm else lookup(desc.src_region)
    dst = lookup(desc.dst_region)
    if (not imm and src is None) or dst is None:
        return ErrorCode.UNKNOWN_REGION
    if (src is not None and not src.perms & Perm.READ) or not dst.perms & Perm.WRITE:
        return ErrorCode.PERMISSION
    if imm and (dst.addr + desc.dst_offset) % IMM_BYTES:  # the bus address: one aligned 8-byte write
        return ErrorCode.MISALIGNED
    if src is not None and desc.src_offset + desc.length > src.size:
        return ErrorCode.OUT_OF_BOUNDS
    if desc.dst_offset + desc.length > dst.size:
        return ErrorCode.OUT_OF_BOUNDS
    if (
        src is not None
        and desc.src_region == desc.dst_region
        and desc.length
        and desc.src_offset < desc.dst_offset + desc.length
        and desc.dst_offset < desc.src_offset + desc.length
    ):
        return ErrorCode.OVERLAP
    return ErrorCode.NONE


def completion_location_error(regions: list[Region | None], region: int, offset: int) -> ErrorCode:
    """Why a queue's completion word cannot live at (region, offset), or NONE."""
    entry = regions[region] if region < len(regions) else None
    if entry is None:
        return ErrorCode.UNKNOWN_REGION
    if not entry.perms & Perm.WRITE:
        return ErrorCode.PERMISSION
    if (entry.addr + offset) % COMPLETION_BYTES:  # the bus address, as for IMM
        return ErrorCode.MISALIGNED
    if offset + COMPLETION_BYTES > entry.size:
        return ErrorCode.OUT_OF_BOUNDS
    return ErrorCode.NONE


@dataclass
class _Queue:
    slots: int
    window: bytearray
    enabled: bool = False
    halted: bool = False
    error: ErrorCode = ErrorCode.NONE
    error_cookie: int = 0
    error_index: int = 0
    start: int = 0
    completion_region: int = 0
    completion_offset: int = 0
    posted: int = 0  # producer index, extended beyond 32 bits
    completed: int = 0
    written: int | None = None  # last completion word written to memory
    pending: tuple[ErrorCode, int] | None = None  # doorbell error, taken once posted work is done

    @property
    def has_work(self) -> bool:
        return self.enabled and not self.halted and (self.completed < self.posted or self.pending is not None)


class _MemoryBuffer(Buffer):
    def __init__(self, memory: BusMemory, addr: int, size: int, placement: str):
        self._memory = memory
        self.addr, self.size, self.placement = addr, size, placement

    def read(self, offset: int, length: int) -> bytes:
        self._check(offset, length)
        return self._memory.read(self.addr + offset, length)

    def write(self, offset: int, data: bytes) -> None:
        self._check(offset, len(data))
        self._memory.write(self.addr + offset, bytes(data))


class ReferenceEngine(Backend):
    """The ABI executed in Python over a modelled bus memory. See the module docstring for the rules."""

    name = "reference"
    modelled_memory = True

    def __init__(self, num_queues: int = 8, slots: int = 64, num_regions: int = 16, errlog_depth: int = 16):
        check_geometry(num_queues, slots, num_regions)
        self.geometry = Geometry(
            num_queues,
            slots,
            num_regions,
            Capability.NOTIFY | Capability.FENCE | Capability.IMM | Capability.ERROR_LOG | Capability.BUS_ERRORS,
        )
        self.memory = BusMemory()
        self._errlog_depth = errlog_depth
        self._rr = 0
        self._closed = False
        self.reset()

    def _check_open(self) -> None:
        if self._closed:
            raise ArkdmaError("the reference engine was closed; open a new one")

    def close(self) -> None:
        self._closed = True

    # --- memory ------------------------------------------------------------------------
    def alloc(self, size: int, placement: str = "host") -> Buffer:
        self._check_open()
        size = check_size(size)
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, not {placement!r}")
        return _MemoryBuffer(self.memory, self.memory.alloc(size), size, "host")

    def owns(self, buffer: Buffer) -> bool:
        return isinstance(buffer, _MemoryBuffer) and buffer._memory is self.memory

    def buffer_at(self, addr: int, size: int) -> Buffer | None:
        return None  # the bus is modelled: any range may be registered (unbacked bytes end in BUS_ERROR)

    def unbacked_address(self, size: int) -> int:
        return self.memory.hole(size)

    # --- host -------------------------------------------------------------------------
    def reset(self) -> None:
        g = self.geometry
        self._regions: list[Region | None] = [None] * g.num_regions
        self._queues = [_Queue(g.slots, bytearray(g.slots * DESCRIPTOR_BYTES)) for _ in range(g.num_queues)]
        self._errlog: deque[ErrorLogEntry] = deque()
        self._errlog_overflow = False
        self._descriptors = 0
        self._bytes = 0

    def _region_index(self, region: int) -> int:
        self._check_open()
        if not 0 <= region < self.geometry.num_regions:
            raise ValueError(f"region id {region} is outside the table (0..{self.geometry.num_regions - 1})")
        return region

    def set_region(self, region: int, addr: int, size: int, perms: int) -> None:
        if not (0 <= addr < 1 << 64 and 0 <= size < 1 << 64 and perms in range(int(Perm.READ | Perm.WRITE) + 1)):
            raise ValueError(f"region {region}: address {addr:#x}, size {size} and perms {perms} must be unsigned "
                             "64-bit values and a mask of Perm.READ and Perm.WRITE")
        self._regions[self._region_index(region)] = Region(addr, size, perms) if perms else None

    def clear_region(self, region: int) -> None:
        self._regions[self._region_index(region)] = None

    def _queue(self, queue: int) -> _Queue:
        self._check_open()
        if not 0 <= queue < self.geometry.num_queues:
            raise ValueError(f"queue {queue} does not exist (0..{self.geometry.num_queues - 1})")
        return self._queues[queue]

    def configure_queue(self, queue: int, completion_region: int, completion_offset: int, start: int = 0) -> None:
        q = self._queue(queue)
        q.completion_region, q.completion_offset, q.start = completion_region, completion_offset, start

    def enable_queue(self, queue: int) -> None:
        q = self._queue(queue)
        if q.enabled:
            return
        q.enabled, q.halted, q.pending, q.written = True, False, None, None
        q.error, q.error_cookie, q.error_index = ErrorCode.NONE, 0, 0
        q.posted = q.completed = q.start
        problem = completion_location_error(self._regions, q.completion_region, q.completion_offset)
        if problem:
            self._halt(queue, problem, 0, q.start & DOORBELL_MASK, write=False)
        else:
            self._write_completion(q)

    def disable_queue(self, queue: int, timeout: float = 5.0) -> None:
        q = self._queue(queue)
        if not q.enabled:
            return
        q.enabled, q.pending = False, None
        self._write_completion(q)

    # --- producer -----------------------------------------------------------------------
    def write_slots(self, queue: int, index: int, raw: bytes) -> None:
        q = self._queue(queue)
        if len(raw) % DESCRIPTOR_BYTES:
            raise ValueError(f"descriptors are {DESCRIPTOR_BYTES} bytes; got {len(raw)} bytes")
        for k in range(len(raw) // DESCRIPTOR_BYTES):
            slot = (index + k) % q.slots
            q.window[slot * DESCRIPTOR_BYTES : (slot + 1) * DESCRIPTOR_BYTES] = raw[
                k * DESCRIPTOR_BYTES : (k + 1) * DESCRIPTOR_BYTES
            ]

    def ring(self, queue: int, producer_index: int) -> None:
        q = self._queue(queue)
        if not q.enabled or q.halted or q.pending is not None:
            return
        value = producer_index & DOORBELL_MASK
        delta = (value - q.posted) & DOORBELL_MASK
        if delta >= 1 << (DOORBELL_BITS - 1):
            q.pending = (ErrorCode.DOORBELL_BACKWARDS, value)
        elif q.posted + delta - q.completed > q.slots:
            q.pending = (ErrorCode.RING_OVERFLOW, value)
        else:
            q.posted += delta

    # --- execution ----------------------------------------------------------------------
    def step(self) -> bool:
        """Execute one descriptor (or take one pending doorbell error), queues in round robin."""
        n = self.geometry.num_queues
        for k in range(n):
            i = (self._rr + k) % n
            if self._queues[i].has_work:
                self._rr = (i + 1) % n
                self._execute(i)
                return True
        return False

    def run(self, max_steps: int | None = None) -> int:
        steps = 0
        while (max_steps is None or steps < max_steps) and self.step():
            steps += 1
        return steps

    def advance(self, descriptors: int) -> None:
        self.run(descriptors)

    def wait_idle(self, timeout: float = 10.0) -> None:
        self.run()

    def _execute(self, queue: int) -> None:
        q = self._queues[queue]
        if q.completed == q.posted:
            code, value = q.pending
            self._halt(queue, code, 0, value)
            return
        index = q.completed
        slot = index % q.slots
        desc = Descriptor.unpack(bytes(q.window[slot * DESCRIPTOR_BYTES : (slot + 1) * DESCRIPTOR_BYTES]))
        code = validate(desc, self._regions)
        if code == ErrorCode.NONE:
            code = self._move(desc)
        if code != ErrorCode.NONE:
            self._halt(queue, code, desc.cookie, index & DOORBELL_MASK)
            return
        q.completed += 1
        self._descriptors += 1
        if desc.flags & Flag.NOTIFY or (q.completed == q.posted and q.pending is None):
            self._write_completion(q)

    def _move(self, desc: Descriptor) -> ErrorCode:
        dst = self._regions[desc.dst_region]
        if desc.flags & Flag.IMM:
            data = desc.src_offset.to_bytes(IMM_BYTES, "little")
        else:
            src = self._regions[desc.src_region]
            if not self.memory.backed(dst.addr + desc.dst_offset, desc.length):
                return ErrorCode.BUS_ERROR
            try:
                data = self.memory.read(src.addr + desc.src_offset, desc.length)
            except MemoryFault:
                return ErrorCode.BUS_ERROR
        try:
            self.memory.write(dst.addr + desc.dst_offset, data)
        except MemoryFault:
            return ErrorCode.BUS_ERROR
        self._bytes += len(data)
        return ErrorCode.NONE

    def _halt(self, queue: int, code: ErrorCode, cookie: int, index: int, write: bool = True) -> None:
        q = self._queues[queue]
        q.halted, q.pending = True, None
        q.error, q.error_cookie, q.error_index = code, cookie, index
        if len(self._errlog) < self._errlog_depth:
            self._errlog.append(ErrorLogEntry(queue, code, cookie, index))
        else:
            self._errlog_overflow = True
        if write:
            self._write_completion(q)

    def _word(self, q: _Queue) -> int:
        return completion_word(q.completed, q.halted)

    def _write_completion(self, q: _Queue) -> None:
        if completion_location_error(self._regions, q.completion_region, q.completion_offset):
            return
        word = self._word(q)
        if word == q.written:
            return
        region = self._regions[q.completion_region]
        try:
            self.memory.write(region.addr + q.completion_offset, word.to_bytes(COMPLETION_BYTES, "little"))
        except MemoryFault:
            return
        q.written = word

    # --- observation --------------------------------------------------------------------
    def queue_state(self, queue: int) -> QueueState:
        q = self._queue(queue)
        return QueueState(
            q.enabled, q.halted, q.has_work, q.error, q.error_cookie, q.error_index, self._word(q)
        )

    def error_log(self) -> list[ErrorLogEntry]:
        entries = list(self._errlog)
        self._errlog.clear()
        return entries

    def errlog_overflow(self) -> bool:
        return self._errlog_overflow

    def clear_errlog_overflow(self) -> None:
        self._errlog_overflow = False

    def counters(self) -> Counters:
        return Counters(self._descriptors, self._bytes, 0)
