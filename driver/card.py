"""The `card` backend: the arkdma engine on an FPGA card, driven through its BAR.

The register sequences come from driver/register_program.py (shared with the simulator's driver model);
this module runs them on a mapped BAR, gives the card host memory it can reach (VFIO DMA mappings), and
maps the BAR for GPU threads: cudaHostRegister(IoMemory | Mapped), then the device pointer, so GPU code
writes descriptors into the card's windows and rings its doorbells with no CPU on the path.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import time
from pathlib import Path
from typing import Protocol

from driver import register_program as rp
from driver.abi import QUEUE, WINDOW_BASE, window_stride
from driver.backend import (PLACEMENTS, Backend, Buffer, Counters, ErrorLogEntry, QueuePointers, QueueState,
                            check_size)
from driver.bar import Bar, BarError, Vfio, open_sysfs, vfio_plan
from driver.discovery import SYSFS_PCI, PciCard, cards
from driver.errors import ArkdmaError, EngineTimeout, EngineUnavailable
from driver.provider import EngineProvider

CUDA_HOST_REGISTER_PORTABLE = 0x1
CUDA_HOST_REGISTER_MAPPED = 0x2
CUDA_HOST_REGISTER_IO_MEMORY = 0x4


class CardError(ArkdmaError):
    """The card could not do what was asked; the message says why and what to do."""


class CardMemory(Protocol):
    """Where the card's buffers come from: memory it can reach, at the bus addresses it uses."""

    def alloc(self, size: int, placement: str) -> Buffer: ...


def cuda_register(ptr: int, size: int, flags: int, what: str) -> int:
    """Register host memory (or a BAR, with IO_MEMORY) with CUDA; returns the device pointer GPU code uses."""
    try:
        from cupy.cuda import runtime
    except ImportError as exc:
        raise CardError(f"{what}: CUDA is missing (CuPy is not installed): pip install 'arkdma[gpu]'") from exc
    try:
        runtime.hostRegister(ptr, size, flags)
        return runtime.pointerGetAttributes(ptr).devicePointer
    except runtime.CUDARuntimeError as exc:
        raise CardError(
            f"{what}: cudaHostRegister failed ({exc}); the GPU needs a CUDA driver, and for a BAR a PCIe path "
            "to the card that allows peer-to-peer writes (same root complex or switch, ACS not blocking it)"
        ) from exc


def cuda_unregister(ptr: int) -> None:
    from cupy.cuda import runtime

    try:
        runtime.hostUnregister(ptr)
    except runtime.CUDARuntimeError:
        pass  # already gone with its context


class CardBuffer(Buffer):
    """Host memory mapped for the card through the IOMMU: `addr` is its IOVA, `host_ptr` where this process
    sees it, `gpu_ptr` (registered with CUDA on first use) where GPU code sees it."""

    placement = "host"

    def __init__(self, vfio: Vfio, size: int):
        if size <= 0:
            raise ValueError(f"buffer size must be positive, not {size}")
        self.size = size
        self._map = mmap.mmap(-1, -(-size // mmap.PAGESIZE) * mmap.PAGESIZE)
        self._view = memoryview(self._map)
        self.host_ptr = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        self._vfio = vfio
        self.addr = vfio.map_dma(self.host_ptr, size)
        self._gpu_ptr = 0

    @property
    def gpu_ptr(self) -> int:
        if not self._gpu_ptr:
            self._gpu_ptr = cuda_register(self.host_ptr, self.size, CUDA_HOST_REGISTER_MAPPED | CUDA_HOST_REGISTER_PORTABLE,
                                          f"buffer at IOVA {self.addr:#x}")
        return self._gpu_ptr

    def read(self, offset: int, length: int) -> bytes:
        self._check(offset, length)
        return bytes(self._view[offset : offset + length])

    def write(self, offset: int, data: bytes) -> None:
        self._check(offset, len(data))
        self._view[offset : offset + len(data)] = data

    def free(self) -> None:
        if self._map is None:
            return
        if self._gpu_ptr:
            cuda_unregister(self.host_ptr)
        self._vfio.unmap_dma(self.addr)
        self._view.release()
        self._map.close()
        self._map = None


class VfioMemory:
    """Host buffers mapped through a VFIO container (the card cannot reach GPU memory through this driver:
    that needs GPUDirect RDMA, so "device" placements get host memory too, as the Backend contract allows)."""

    def __init__(self, vfio: Vfio):
        self.vfio = vfio
        self.buffers: list[CardBuffer] = []

    def alloc(self, size: int, placement: str) -> Buffer:
        buf = CardBuffer(self.vfio, size)
        self.buffers.append(buf)
        return buf

    def close(self) -> None:
        for b in self.buffers:
            b.free()
        self.buffers.clear()


class NoDma:
    """Register access only (a BAR mapped through sysfs): there are no safe bus addresses to give the card."""

    def alloc(self, size: int, placement: str) -> Buffer:
        raise CardError(
            "the card's BAR is mapped through sysfs, which gives no IOMMU mappings for DMA: bind the card to "
            "vfio-pci (see `arkdma info`) so the driver can give it memory"
        )


class CardBackend(Backend):
    """One engine behind a BAR. `memory` gives the buffers the card reaches; control calls wait at most `timeout`."""

    name = "card"
    completion_placement = "host"

    def __init__(self, bar: Bar, memory: CardMemory, *, timeout: float = 5.0, on_close=None):
        self.bar, self.memory, self.timeout = bar, memory, timeout
        self._on_close = on_close
        try:
            self.geometry = rp.decode_identity([bar.read32(a) for a in rp.identity_addresses()])
        except ValueError as exc:
            raise CardError(f"the BAR does not hold an arkdma engine we can drive: {exc}") from exc
        self._gpu_base = 0
        self._run(rp.start_engine())

    # --- running register programs ------------------------------------------------------
    def _run(self, steps: list[rp.Step], timeout: float | None = None) -> None:
        for step in steps:
            if isinstance(step, rp.Write):
                self.bar.write32(step.addr, step.value)
            else:
                self._poll(step, self.timeout if timeout is None else timeout)

    def _poll(self, poll: rp.Poll, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        nap = 1e-6
        while (self.bar.read32(poll.addr) & poll.mask) != poll.expect:
            if time.monotonic() > deadline:
                raise EngineTimeout(f"card: waited {timeout:.1f} s for {poll.what}; the engine does not answer "
                                    "(is its clock running? reset it or reload the bitstream)")
            time.sleep(nap)
            nap = min(nap * 2, 1e-3)

    def _read(self, addresses: list[int]) -> list[int]:
        return [self.bar.read32(a) for a in addresses]

    def _check_queue(self, queue: int) -> None:
        if not 0 <= queue < self.geometry.num_queues:
            raise CardError(f"queue {queue} does not exist on this card (0..{self.geometry.num_queues - 1})")

    def _check_region(self, region: int) -> None:
        if not 0 <= region < self.geometry.num_regions:
            raise CardError(f"region {region} does not exist on this card (0..{self.geometry.num_regions - 1})")

    # --- memory -------------------------------------------------------------------------
    def alloc(self, size: int, placement: str = "host") -> Buffer:
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be 'host' or 'device', not {placement!r}")
        return self.memory.alloc(check_size(size), placement)

    def owns(self, buffer: Buffer) -> bool:
        return any(b is buffer for b in getattr(self.memory, "buffers", ()))

    def buffer_at(self, addr: int, size: int) -> Buffer | None:
        for b in getattr(self.memory, "buffers", ()):
            if b.addr <= addr and addr + size <= b.addr + b.size:
                return b
        return None

    def unbacked_address(self, size: int) -> int:
        hole = getattr(self.memory, "unbacked_address", None)
        if hole is None:
            raise NotImplementedError("this card's memory gives no unbacked addresses")
        return hole(size)

    # --- host control -------------------------------------------------------------------
    def set_region(self, region: int, addr: int, size: int, perms: int) -> None:
        self._check_region(region)
        if not (0 <= addr < 1 << 64 and 0 <= size < 1 << 64):
            raise ValueError(f"region address {addr:#x} and size {size} must be unsigned 64-bit values")
        self._run(rp.set_region(region, addr, size, perms))

    def clear_region(self, region: int) -> None:
        self._check_region(region)
        self._run(rp.clear_region(region))

    def configure_queue(self, queue: int, completion_region: int, completion_offset: int, start: int = 0) -> None:
        self._check_queue(queue)
        self._run(rp.configure_queue(queue, completion_region, completion_offset, start))

    def enable_queue(self, queue: int) -> None:
        self._check_queue(queue)
        self._run(rp.enable_queue(queue))

    def disable_queue(self, queue: int, timeout: float = 5.0) -> None:
        self._check_queue(queue)
        self._run(rp.disable_queue(queue), timeout)

    def reset(self) -> None:
        self._run(rp.reset_engine())

    # --- producer (the CPU standing in for a GPU thread) -------------------------------------
    def write_slots(self, queue: int, index: int, raw: bytes) -> None:
        self._check_queue(queue)
        for offset, data in rp.window_writes(queue, index, raw, self.geometry.slots):
            self.bar.write(offset, data)

    def ring(self, queue: int, producer_index: int) -> None:
        self._check_queue(queue)
        self._run(rp.ring(queue, producer_index))

    # --- what GPU code needs ------------------------------------------------------------------
    def queue_pointers(self, queue: int) -> QueuePointers:
        """The queue's window and doorbell in the BAR, for this process and for GPU threads (the BAR is
        registered with CUDA as I/O memory on first use)."""
        self._check_queue(queue)
        host = self.bar.host_address
        if not host:
            raise CardError("this BAR is not memory-mapped in this process, so the GPU cannot map it either")
        if not self._gpu_base:
            self._gpu_base = cuda_register(host, self.bar.size, CUDA_HOST_REGISTER_IO_MEMORY | CUDA_HOST_REGISTER_MAPPED,
                                           "the card's BAR")
        window = WINDOW_BASE + queue * window_stride(self.geometry.slots)
        doorbell = QUEUE.address("DOORBELL", queue)
        return QueuePointers(host + window, self._gpu_base + window, host + doorbell, self._gpu_base + doorbell,
                             self.geometry.slots)

    def gpu_address(self, buffer: Buffer) -> int:
        if not self.owns(buffer):
            raise ValueError(f"{buffer!r} is not a live buffer of this card")
        return buffer.gpu_ptr

    # --- observation ---------------------------------------------------------------------------
    def queue_state(self, queue: int) -> QueueState:
        self._check_queue(queue)
        return rp.decode_queue_state(self._read(rp.queue_state_addresses(queue)))

    def error_log(self) -> list[ErrorLogEntry]:
        out = []
        for _ in range(1 << 16):  # the log is finite; this only bounds a card that never clears ERRLOG_VALID
            if not rp.errlog_valid(self.bar.read32(rp.status_address())):
                return out
            out.append(rp.decode_errlog(self._read(rp.errlog_addresses())))
            self._run(rp.pop_errlog())
        raise CardError("the error log never empties: STATUS.ERRLOG_VALID stays set after 65536 pops")

    def errlog_overflow(self) -> bool:
        return rp.errlog_overflow(self.bar.read32(rp.status_address()))

    def clear_errlog_overflow(self) -> None:
        self._run(rp.clear_errlog_overflow())

    def counters(self) -> Counters:
        return rp.decode_counters(self._read(rp.counter_addresses()))

    def wait_idle(self, timeout: float = 10.0) -> None:
        self._run(rp.wait_idle(), timeout)

    def close(self) -> None:
        if self.bar is None:
            return
        if self._gpu_base:
            cuda_unregister(self.bar.host_address)
            self._gpu_base = 0
        close = getattr(self.memory, "close", None)
        if close:
            close()
        self.bar.close()
        self.bar = None
        if self._on_close:
            self._on_close()


def open_card(card: PciCard, method: str = "auto", bar: int = 0) -> CardBackend:
    """Open `card` through VFIO ("vfio", DMA included), sysfs ("sysfs", registers only) or whichever works ("auto")."""
    if method not in ("auto", "vfio", "sysfs"):
        raise ValueError(f"method must be auto, vfio or sysfs, not {method!r}")
    if method == "vfio" or (method == "auto" and _bound_to_vfio(card.sysfs)):
        vfio = Vfio(card.sysfs)
        try:
            return CardBackend(vfio.bar(bar), VfioMemory(vfio), on_close=vfio.close)
        except BaseException:
            vfio.close()
            raise
    return CardBackend(open_sysfs(card.sysfs, bar), NoDma())


def _bound_to_vfio(device: Path) -> bool:
    driver = device / "driver"
    return driver.is_symlink() and driver.resolve().name == "vfio-pci"


class CardProvider(EngineProvider):
    name = "card"
    summary = "the arkdma engine on an FPGA card; GPU threads write descriptors into its BAR"

    def __init__(self, sysfs: Path = SYSFS_PCI):
        self.sysfs = sysfs

    def _card(self) -> PciCard:
        found, why = cards(self.sysfs)
        if not found:
            raise EngineUnavailable(f"no arkdma card: {why}; plug one in and load its bitstream, or use software-cuda")
        return found[0]

    def unavailable_reason(self) -> str | None:
        try:
            card = self._card()
            if _bound_to_vfio(card.sysfs):
                vfio_plan(card.sysfs)
            else:
                resource = card.sysfs / "resource0"
                if not resource.exists():
                    return f"card {card.address} has no BAR0 ({resource} missing)"
                if not os.access(resource, os.R_OK | os.W_OK):
                    return f"no permission to map {resource}: run as root, or bind the card to vfio-pci and own /dev/vfio/N"
        except (EngineUnavailable, BarError) as exc:
            return str(exc)
        return None

    def open(self, **params) -> Backend:
        reason = self.unavailable_reason()
        if reason:
            raise EngineUnavailable(f"engine card cannot run here: {reason}")
        backend = open_card(self._card(), params.pop("method", "auto"))
        wanted = {k: params.pop(k) for k in ("num_queues", "slots", "num_regions") if k in params}
        if params:
            backend.close()
            raise CardError(f"the card takes no parameters {', '.join(params)}")
        g = backend.geometry
        if wanted.get("slots", g.slots) != g.slots or wanted.get("num_queues", 1) > g.num_queues or \
                wanted.get("num_regions", 1) > g.num_regions:
            backend.close()
            raise EngineUnavailable(
                f"the card was built with {g.num_queues} queues of {g.slots} slots and {g.num_regions} regions; "
                f"asked for {wanted}: rebuild the bitstream with those parameters"
            )
        return backend
