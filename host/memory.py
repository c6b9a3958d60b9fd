"""Memory the software engine reaches: host buffers (pinned and mapped for the CUDA executor) and GPU
buffers, allocated by the native library and freed when the buffer goes or the engine closes."""

from __future__ import annotations

import ctypes
import weakref

import numpy as np

from driver.backend import Buffer
from driver.errors import ArkdmaError
from host import native

HOST, DEVICE = 0, 1


class EngineClosed(ArkdmaError):
    """The engine that owns this memory was closed."""


class NativeHandle:
    """The native engine pointer, shared by the engine and its buffers so none outlives it."""

    def __init__(self, ptr: int):
        self.ptr: int | None = ptr
        self.buffers: weakref.WeakSet[NativeBuffer] = weakref.WeakSet()
        self.regions: dict[int, NativeBuffer] = {}  # region id -> the buffer under it, kept alive

    def owner(self, addr: int, size: int) -> "NativeBuffer | None":
        """The engine-allocated buffer that holds [addr, addr + size), if any."""
        for buf in self.buffers:
            if buf.addr <= addr and addr + size <= buf.addr + buf.size:
                return buf
        return None

    def get(self) -> int:
        if self.ptr is None:
            raise EngineClosed("the software engine was closed; open a new one")
        return self.ptr


class NativeBuffer(Buffer):
    """A buffer from the engine's allocator. `addr` is the bus address descriptors and regions use
    (the host pointer for host memory; the device pointer for GPU memory and, on CUDA, the mapped one)."""

    def __init__(self, handle: NativeHandle, size: int, placement: str):
        if size <= 0:
            raise ValueError(f"buffer size must be positive, not {size}")
        if placement not in ("host", "device"):
            raise ValueError(f"placement must be 'host' or 'device', not {placement!r}")
        lib = native.load()
        host, bus = ctypes.c_uint64(0), ctypes.c_uint64(0)
        where = DEVICE if placement == "device" else HOST
        native.check(lib.arkdma_sw_mem_alloc(handle.get(), size, where, ctypes.byref(host), ctypes.byref(bus)), "alloc")
        self._handle = handle
        self.size, self.placement = size, placement
        self.addr = bus.value
        self.host_ptr = host.value  # 0 for GPU memory
        self._free = weakref.finalize(self, _free, handle, host.value, bus.value, where)
        handle.buffers.add(self)

    def view(self) -> np.ndarray:
        """The bytes as a NumPy array (host memory only: GPU memory has no host view)."""
        if not self.host_ptr:
            raise ValueError("GPU memory has no host view; use read() and write()")
        self._handle.get()
        return np.ctypeslib.as_array((ctypes.c_uint8 * self.size).from_address(self.host_ptr))

    def read(self, offset: int, length: int) -> bytes:
        self._check(offset, length)
        ptr = self._handle.get()
        if self.host_ptr:
            return ctypes.string_at(self.host_ptr + offset, length)
        out = ctypes.create_string_buffer(length)
        native.check(native.load().arkdma_sw_mem_read(ptr, self.addr + offset, out, length), "read GPU memory")
        return out.raw

    def write(self, offset: int, data: bytes) -> None:
        data = bytes(data)
        self._check(offset, len(data))
        ptr = self._handle.get()
        if self.host_ptr:
            ctypes.memmove(self.host_ptr + offset, data, len(data))
            return
        native.check(native.load().arkdma_sw_mem_write(ptr, self.addr + offset, data, len(data)), "write GPU memory")

    def free(self) -> None:
        """Give the memory back now (it also goes with the buffer or the engine). Refused while a
        region covers it: the engine could still copy into it."""
        regions = [r for r, b in self._handle.regions.items() if b is self]
        if regions:
            raise ArkdmaError(f"buffer at {self.addr:#x} backs region(s) {regions}; clear them before freeing it")
        self._free()


def _free(handle: NativeHandle, host: int, bus: int, where: int) -> None:
    if handle.ptr is not None:
        native.load().arkdma_sw_mem_free(handle.ptr, host, bus, where)


def free_all(handle: NativeHandle) -> None:
    """Free every buffer still alive before the engine itself goes."""
    handle.regions.clear()
    for buf in list(handle.buffers):
        buf.free()
