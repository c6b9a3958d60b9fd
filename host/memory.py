"""Memory the software engine reaches: host buffers (pinned and mapped for the CUDA executor) and GPU
buffers, allocated by the native library and freed when the buffer goes or the engine closes."""

from __future__ import annotations

import ctypes
import weakref

import numpy as np

from driver.backend import PLACEMENTS, Buffer, check_size
from driver.errors import ArkdmaError
from host import native

HOST, DEVICE = 0, 1


class EngineClosed(ArkdmaError):
    """The engine that owns this memory was closed."""


class NativeHandle:
    """The native engine pointer, shared by the engine and its buffers so none outlives it.

    Host views of buffers (`NativeBuffer.view()`) keep their memory valid: closing the engine frees
    every buffer nobody views, and leaves the rest, and the native engine that owns them, to the
    last view's end."""

    def __init__(self, ptr: int):
        self.ptr: int | None = ptr  # None once closed: no call reaches the engine any more
        self.native: int | None = ptr  # the engine object, alive until the last view is gone
        self.buffers: weakref.WeakSet[NativeBuffer] = weakref.WeakSet()
        self.regions: dict[int, NativeBuffer] = {}  # region id -> the buffer under it, kept alive
        self.views = 0

    def owner(self, addr: int, size: int) -> "NativeBuffer | None":
        """The engine-allocated buffer that holds [addr, addr + size), if any."""
        for buf in self.buffers:
            if buf._free.alive and buf.addr <= addr and addr + size <= buf.addr + buf.size:
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
        size = check_size(size)  # before it becomes a uint64_t: 2**64 would wrap to 0
        if placement not in PLACEMENTS:
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
        self.views = 0
        handle.buffers.add(self)

    @property
    def alive(self) -> bool:
        return self._free.alive and self._handle.ptr is not None

    def view(self) -> np.ndarray:
        """The bytes as a NumPy array (host memory only: GPU memory has no host view). The array keeps
        the memory valid, also past free() attempts and the engine's close()."""
        if not self.host_ptr:
            raise ValueError("GPU memory has no host view; use read() and write()")
        if not self.alive:
            raise EngineClosed("this buffer was freed (or its engine closed); allocate a new one")
        return np.asarray(_View(self))

    def read(self, offset: int, length: int) -> bytes:
        self._check(offset, length)
        ptr = self._live()
        if self.host_ptr:
            return ctypes.string_at(self.host_ptr + offset, length)
        out = ctypes.create_string_buffer(length)
        native.check(native.load().arkdma_sw_mem_read(ptr, self.addr + offset, out, length), "read GPU memory")
        return out.raw

    def write(self, offset: int, data: bytes) -> None:
        data = bytes(data)
        self._check(offset, len(data))
        ptr = self._live()
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
        if self.views:
            raise ArkdmaError(f"buffer at {self.addr:#x} has {self.views} live view(s); drop them before freeing it")
        self._free()

    def _live(self) -> int:
        ptr = self._handle.get()
        if not self._free.alive:
            raise EngineClosed(f"buffer at {self.addr:#x} was freed; allocate a new one")
        return ptr


class _View:
    """Exports a buffer's host bytes to NumPy and keeps the buffer (and its engine) alive meanwhile."""

    def __init__(self, buffer: NativeBuffer):
        self._buffer = buffer
        buffer.views += 1
        buffer._handle.views += 1
        self.__array_interface__ = {
            "shape": (buffer.size,), "typestr": "|u1", "data": (buffer.host_ptr, False), "version": 3,
        }

    def __del__(self) -> None:
        buffer, handle = self._buffer, self._buffer._handle
        buffer.views -= 1
        handle.views -= 1
        if handle.ptr is None and handle.views == 0:
            _destroy(handle)


def _free(handle: NativeHandle, host: int, bus: int, where: int) -> None:
    if handle.native is not None:
        native.load().arkdma_sw_mem_free(handle.native, host, bus, where)


def free_all(handle: NativeHandle) -> None:
    """Close: free every buffer nobody views; the native engine goes now, or with the last view."""
    handle.regions.clear()
    viewed = [buf for buf in list(handle.buffers) if buf.views]
    for buf in list(handle.buffers):
        if not buf.views:
            buf._free()
    handle.ptr = None
    if not viewed:
        _destroy(handle)


def _destroy(handle: NativeHandle) -> None:
    """Free what is left and destroy the native engine (its thread is already stopped)."""
    if handle.native is None:
        return
    for buf in list(handle.buffers):
        buf._free()
    native.load().arkdma_sw_destroy(handle.native)
    handle.native = None
