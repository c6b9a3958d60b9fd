"""The software engine as a Backend: a native C++ thread that polls the queues' doorbells in pinned
host memory and moves data with memcpy ("host" executor) or the GPU's copy engines ("cuda").

GPU code drives it exactly as it drives the card: write 32-byte descriptors into a queue's
submission window, `__threadfence_system()`, write the doorbell. `queue_pointers(q)` gives the
host and device addresses of both, for the GPU-side device handle.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass

from driver.abi import DESCRIPTOR_BYTES, Capability, ErrorCode, check_geometry
from driver.backend import PLACEMENTS, Backend, Counters, ErrorLogEntry, Geometry, QueuePointers, QueueState
from driver.errors import ArkdmaError, EngineTimeout
from host import native
from host.affinity import cpus_near
from host.memory import NativeBuffer, NativeHandle, free_all

CAPS = Capability.NOTIFY | Capability.FENCE | Capability.IMM | Capability.ERROR_LOG | Capability.PERF_COUNTERS
EXECUTORS = {"host": native.Executor.HOST, "cuda": native.Executor.CUDA}
ERRLOG_BATCH = 256  # entries one call pops at most (a log built deeper is read in several)
HOST_IDLE_SPINS = 20_000  # host executor: idle polls before the thread naps (CI shares its cores)
CUDA_STREAMS = 4  # copy streams per queue: 64 KiB scattered at 256 in flight 43-44 GB/s vs 32-36 with one (H100)


@dataclass(frozen=True)
class EngineStats:
    """What the engine thread did since it was built (host/native/engine.h, enum Stat)."""

    polls: int
    drains: int  # polls that issued descriptors
    issued: int
    drain_ns: int  # time spent issuing: doorbell read to completion write enqueued
    copies: int  # copies started, after merging
    api_calls: int  # CUDA driver calls on the issue path
    completions: int  # completion words written
    ns_copy: int  # CUDA executor: time inside the copy calls,
    ns_write: int  # cuStreamWriteValue64,
    ns_record: int  # cuEventRecord of completion records,
    ns_join: int  # joining streams,
    ns_query: int  # cuEventQuery (retiring; outside drain_ns)

    @property
    def ns_per_descriptor(self) -> float:
        return self.drain_ns / self.issued if self.issued else float("nan")

    def minus(self, earlier: "EngineStats") -> "EngineStats":
        return EngineStats(*(getattr(self, f) - getattr(earlier, f) for f in native.STAT_NAMES))


class SoftwareEngine(Backend):
    """The software engine. `executor` is "host" (memcpy; host memory only) or "cuda".

    Options: `streams_per_queue` (CUDA copy streams per queue; default 4), `merge` (contiguous descriptors
    become one copy), `batch_copies` (one cuMemcpyBatchAsync per stream where the driver has it),
    `cpus` (None, "auto" for the CPUs near the GPU, or a list), `spin_before_sleep` (idle polls
    before the thread naps `sleep_us`; None never naps), `stop_check_every` (polls between two
    looks at the stop flag), `timeout` (seconds any control call may take).
    """

    def __init__(
        self,
        executor: str = "host",
        num_queues: int = 8,
        slots: int = 64,
        num_regions: int = 16,
        errlog_depth: int = 16,
        *,
        streams_per_queue: int | None = None,
        merge: bool = True,
        batch_copies: bool = True,
        device: int = 0,
        cpus: str | list[int] | None = None,
        spin_before_sleep: int | None = -1,
        sleep_us: int = 20,
        stop_check_every: int = 64,
        timeout: float = 10.0,
        start: bool = True,
    ):
        if executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, not {executor!r}")
        check_geometry(num_queues, slots, num_regions)
        native.check_argument("SoftwareEngine", "timeout", ctypes.c_double, timeout)
        if spin_before_sleep == -1:  # the default: nap in CI (host), spin for latency (cuda)
            spin_before_sleep = HOST_IDLE_SPINS if executor == "host" else None
        if streams_per_queue is None:  # several copy streams only pay off on the GPU (see CUDA_STREAMS)
            streams_per_queue = CUDA_STREAMS if executor == "cuda" else 1
        self.executor = executor
        self.name = f"software-{executor}"
        self.geometry = Geometry(num_queues, slots, num_regions, CAPS)
        self.completion_placement = "device" if executor == "cuda" else "host"
        self.host_pointers = executor == "host"  # memcpy reaches any host memory of this process
        self.timeout = timeout
        self.cuda_device = native.cuda_probe(device) if executor == "cuda" else None
        if cpus == "auto":
            cpus = cpus_near(self.cuda_device.pci_bus_id) if self.cuda_device else None
        self.cpus = list(cpus) if cpus else []
        cpu_array = (ctypes.c_int32 * max(1, len(self.cpus)))(*self.cpus)
        config = native.Config(
            num_queues, slots, num_regions, errlog_depth, streams_per_queue, int(batch_copies), int(merge),
            stop_check_every, -1 if spin_before_sleep is None else spin_before_sleep, sleep_us, device,
            len(self.cpus), cpu_array,
        )
        self._lib = native.load()
        ptr = ctypes.c_void_p()
        native.check(self._lib.arkdma_sw_create(ctypes.byref(config), EXECUTORS[executor], ctypes.byref(ptr)),
                     f"open engine {self.name}")
        self._handle = NativeHandle(ptr.value)
        self._pointers = [self._queue_pointers(q) for q in range(num_queues)]
        if start:
            self.start()

    # --- the engine thread ------------------------------------------------------------------
    def start(self) -> None:
        """Start the polling thread (engines start it when built unless start=False)."""
        native.check(self._lib.arkdma_sw_start(self._ptr), "start the engine thread")

    def stop(self) -> None:
        """Stop the polling thread. State stays; doorbells written meanwhile are read at start()."""
        native.check(self._lib.arkdma_sw_stop(self._ptr, self.timeout), "stop the engine thread")

    @property
    def running(self) -> bool:
        return bool(self._lib.arkdma_sw_running(self._ptr))

    @property
    def _ptr(self) -> int:
        return self._handle.get()

    def close(self) -> None:
        if self._handle.ptr is None:
            return
        try:
            self.stop()
        finally:
            free_all(self._handle)  # destroys the native engine now, or once the last host view goes

    def __del__(self):
        if getattr(self, "_handle", None) is not None and self._handle.ptr is not None:
            self.close()

    # --- memory -----------------------------------------------------------------------------
    def alloc(self, size: int, placement: str = "host") -> NativeBuffer:
        """Engine-reachable memory. The host executor always gives host memory; the CUDA executor
        gives GPU memory for "device" and pinned, mapped host memory for "host"."""
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be 'host' or 'device', not {placement!r}")
        if self.executor == "host":
            placement = "host"
        return NativeBuffer(self._handle, size, placement)

    def owns(self, buffer) -> bool:
        return isinstance(buffer, NativeBuffer) and buffer._handle is self._handle and buffer.alive

    def buffer_at(self, addr: int, size: int) -> NativeBuffer | None:
        return self._handle.owner(addr, size)

    def queue_pointers(self, queue: int) -> QueuePointers:
        """The queue's submission window and doorbell, for a producer's device handle (the device addresses
        are 0 on the host executor, whose memory no GPU maps)."""
        self._check_queue(queue)
        return self._pointers[queue]

    def gpu_address(self, buffer) -> int:
        if self.cuda_device is None:
            return super().gpu_address(buffer)
        if not self.owns(buffer):
            raise ValueError(f"{buffer!r} is not a live buffer of engine {self.name}")
        return buffer.addr  # the CUDA executor's bus addresses are CUDA addresses

    def _queue_pointers(self, queue: int) -> QueuePointers:
        out = (ctypes.c_uint64 * 4)()
        native.check(self._lib.arkdma_sw_queue_pointers(self._ptr, queue, out), "queue pointers")
        return QueuePointers(out[0], out[1], out[2], out[3], self.geometry.slots)

    def _check_queue(self, queue: int) -> None:
        if not 0 <= queue < self.geometry.num_queues:
            raise ValueError(f"queue {queue} does not exist (0..{self.geometry.num_queues - 1})")

    # --- host control -----------------------------------------------------------------------
    def set_region(self, region: int, addr: int, size: int, perms: int) -> None:
        if addr < 0 or size < 0 or addr >= 1 << 64 or size >= 1 << 64:
            raise ValueError(f"region address {addr:#x} and size {size} must be unsigned 64-bit values")
        native.check(self._lib.arkdma_sw_set_region(self._ptr, region, addr, size, perms, self.timeout),
                     f"region {region}")
        # An engine-allocated buffer under a region stays alive while the region exists.
        owner = self._handle.owner(addr, size) if perms else None
        if owner is None:
            self._handle.regions.pop(region, None)
        else:
            self._handle.regions[region] = owner

    def clear_region(self, region: int) -> None:
        native.check(self._lib.arkdma_sw_set_region(self._ptr, region, 0, 0, 0, self.timeout), f"region {region}")
        self._handle.regions.pop(region, None)

    def configure_queue(self, queue: int, completion_region: int, completion_offset: int, start: int = 0) -> None:
        self._check_queue(queue)
        if not 0 <= completion_region < 1 << 16:
            raise ValueError(f"completion region must be a 16-bit region id, not {completion_region}")
        if not 0 <= completion_offset < 1 << 64 or not 0 <= start < 1 << 63:
            raise ValueError(f"completion offset {completion_offset} or start {start} out of range")
        native.check(
            self._lib.arkdma_sw_configure_queue(self._ptr, queue, completion_region, completion_offset, start,
                                                self.timeout),
            f"configure queue {queue}",
        )

    def enable_queue(self, queue: int) -> None:
        self._check_queue(queue)
        native.check(self._lib.arkdma_sw_enable_queue(self._ptr, queue, self.timeout), f"enable queue {queue}")

    def disable_queue(self, queue: int, timeout: float = 5.0) -> None:
        self._check_queue(queue)
        native.check(self._lib.arkdma_sw_disable_queue(self._ptr, queue, timeout), f"disable queue {queue}")

    def reset(self) -> None:
        native.check(self._lib.arkdma_sw_reset(self._ptr, self.timeout), "reset")
        self._handle.regions.clear()

    # --- producer (the CPU standing in for a GPU thread) --------------------------------------
    def write_slots(self, queue: int, index: int, raw: bytes) -> None:
        self._check_queue(queue)
        if len(raw) % DESCRIPTOR_BYTES:
            raise ValueError(f"descriptors are {DESCRIPTOR_BYTES} bytes; got {len(raw)} bytes")
        count = len(raw) // DESCRIPTOR_BYTES
        slots = self.geometry.slots
        if count > slots:
            raise ValueError(f"{count} descriptors do not fit a window of {slots} slots")
        base = self._pointers[queue].window_host
        self._handle.get()
        done = 0
        while done < count:
            slot = (index + done) % slots
            n = min(count - done, slots - slot)
            ctypes.memmove(base + slot * DESCRIPTOR_BYTES, raw[done * DESCRIPTOR_BYTES : (done + n) * DESCRIPTOR_BYTES],
                           n * DESCRIPTOR_BYTES)
            done += n

    def ring(self, queue: int, producer_index: int) -> None:
        self._check_queue(queue)
        native.check(self._lib.arkdma_sw_ring(self._ptr, queue, producer_index & 0xFFFFFFFF, self.timeout),
                     f"doorbell of queue {queue}")

    # --- observation ------------------------------------------------------------------------
    def queue_state(self, queue: int) -> QueueState:
        self._check_queue(queue)
        info = native.QueueInfo()
        native.check(self._lib.arkdma_sw_queue_state(self._ptr, queue, ctypes.byref(info), self.timeout),
                     f"state of queue {queue}")
        return QueueState(bool(info.enabled), bool(info.halted), bool(info.busy), ErrorCode(info.error),
                          info.error_cookie, info.error_index, info.completion_word)

    def error_log(self) -> list[ErrorLogEntry]:
        entries = (native.ErrlogEntry * ERRLOG_BATCH)()
        count = ctypes.c_uint32(0)
        out: list[ErrorLogEntry] = []
        while True:
            native.check(self._lib.arkdma_sw_error_log(self._ptr, entries, len(entries), ctypes.byref(count),
                                                       self.timeout), "error log")
            out += [ErrorLogEntry(e.queue, ErrorCode(e.code), e.cookie, e.index) for e in entries[: count.value]]
            if count.value < len(entries):
                return out

    def errlog_overflow(self) -> bool:
        over = ctypes.c_uint32(0)
        native.check(self._lib.arkdma_sw_errlog_overflow(self._ptr, ctypes.byref(over), self.timeout),
                     "error log overflow flag")
        return bool(over.value)

    def clear_errlog_overflow(self) -> None:
        native.check(self._lib.arkdma_sw_clear_errlog_overflow(self._ptr, self.timeout),
                     "clear the error log overflow flag")

    def counters(self) -> Counters:
        d, b = ctypes.c_uint64(0), ctypes.c_uint64(0)
        native.check(self._lib.arkdma_sw_counters(self._ptr, ctypes.byref(d), ctypes.byref(b), self.timeout),
                     "counters")
        return Counters(d.value, b.value, 0)

    def busy(self) -> bool:
        out = ctypes.c_int(0)
        native.check(self._lib.arkdma_sw_busy(self._ptr, ctypes.byref(out), self.timeout), "busy")
        return bool(out.value)

    def wait_idle(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        nap = 20e-6
        while self.busy():
            if not self.running:
                raise ArkdmaError(f"engine {self.name} has work but its thread is stopped; start() it first")
            if time.monotonic() > deadline:
                raise EngineTimeout(f"engine {self.name} still busy after {timeout:.1f} s; {self.note() or 'no error noted'}")
            time.sleep(nap)
            nap = min(nap * 2, 1e-3)

    def stats(self) -> EngineStats:
        out = (ctypes.c_uint64 * len(native.STAT_NAMES))()
        self._lib.arkdma_sw_stats(self._ptr, out, len(out))
        return EngineStats(*out)

    def note(self) -> str:
        """The last error the executor noted (a failed CUDA call, say), then cleared; '' when none."""
        buf = ctypes.create_string_buffer(1024)
        self._lib.arkdma_sw_take_note(self._ptr, buf, len(buf))
        text = buf.value.decode(errors="replace")
        return "" if text == "no detail" else text
