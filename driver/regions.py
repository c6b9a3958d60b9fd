"""Host-side bookkeeping of memory regions: ids, memory checks, overlap and permission checks, then the
engine's table.

A region may only cover memory the engine can keep alive and reach (the way `ibv_reg_mr` refuses
unmapped memory): a buffer this engine allocated, an address range inside one, a Python buffer on an
engine that reads host memory by pointer, or a GPU array (`driver.gpu.arrays.register_array`). The
region holds a reference to that memory until it is unregistered. `register_unsafe` is the one way to
name a raw address, for callers that vouch for the memory themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from driver.abi import Perm
from driver.backend import Backend, Buffer
from driver.errors import RegionError

_ALL_PERMS = Perm.READ | Perm.WRITE
_U64 = 1 << 64


@dataclass(frozen=True)
class RegionHandle:
    """A registered region: what a descriptor names as (region, offset)."""

    id: int
    addr: int
    size: int
    perms: Perm

    def __int__(self) -> int:
        return self.id


def _integer(what: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RegionError(f"{what} must be an int, not {type(value).__name__} {value!r}")
    return value


def _permissions(perms) -> Perm:
    perms = _integer("perms", int(perms) if isinstance(perms, Perm) else perms)
    if perms & ~int(_ALL_PERMS) or perms < 0:
        raise RegionError(f"perms {perms} is not a combination of Perm.READ ({int(Perm.READ)}) and Perm.WRITE "
                          f"({int(Perm.WRITE)})")
    if not perms:
        raise RegionError("a region needs READ, WRITE or both; use unregister() to remove one")
    return Perm(perms)


class RegionTable:
    """Gives out region ids and refuses registrations the engine could not keep safe.

    User regions take ids from 0 upwards; the device's own regions (its queues' completion words) take
    ids from the top and are never reachable through `register`, `unregister` or a host queue's post.
    """

    def __init__(self, backend: Backend):
        self._backend = backend
        self._regions: dict[int, RegionHandle] = {}
        self._kept: dict[int, object] = {}  # region id -> the memory's owner, alive while the region is
        self._internal: set[int] = set()

    # --- registration ---------------------------------------------------------------
    def register(
        self,
        buffer: Buffer | None = None,
        *,
        addr: int | None = None,
        size: int | None = None,
        offset: int = 0,
        perms: Perm = Perm.READ | Perm.WRITE,
        region: int | None = None,
    ) -> RegionHandle:
        """Register `size` bytes at `offset` into `buffer` (a Buffer from this engine's alloc()), or the
        bus range [addr, addr + size) inside such a buffer. The region keeps that buffer alive."""
        if buffer is not None:
            if addr is not None:
                raise RegionError("give a buffer or addr=, not both")
            if not isinstance(buffer, Buffer):
                raise RegionError(
                    f"{type(buffer).__name__} is not an engine buffer: register memory from this device's alloc(), "
                    "host memory with register_host(), a GPU array with driver.gpu.arrays.register_array()"
                )
            if not self._backend.owns(buffer):
                raise RegionError(
                    f"this buffer ({buffer.size} bytes at {buffer.addr:#x}) was not allocated by engine "
                    f"{self._backend.name} (another device's, or freed): its owner could free it under the "
                    "region; allocate it with this device's alloc()"
                )
            offset = _integer("offset", offset)
            size = buffer.size - offset if size is None else _integer("size", size)
            if offset < 0 or size < 0 or offset + size > buffer.size:
                raise RegionError(
                    f"region [{offset}, {offset + size}) runs outside its buffer of {buffer.size} bytes"
                )
            return self._add(buffer.addr + offset, size, perms, region, keep=buffer)
        if addr is None or size is None:
            raise RegionError("give a buffer, or both addr= and size=")
        addr, size = _integer("addr", addr), _integer("size", size)
        keep = self._backend.buffer_at(addr, size) if 0 <= addr and 0 < size else None
        if keep is None and not self._backend.modelled_memory:
            raise RegionError(
                f"[{addr:#x}, {addr + size:#x}) is not inside memory engine {self._backend.name} allocated, so "
                "nothing keeps it valid while the engine copies: register a buffer from alloc(), host memory "
                "with register_host(), a GPU array with register_array(), or, vouching for the memory "
                "yourself, register_unsafe()"
            )
        return self._add(addr, size, perms, region, keep)

    def register_host(self, obj, *, perms: Perm = Perm.READ | Perm.WRITE, region: int | None = None) -> RegionHandle:
        """Register the bytes of a contiguous Python object with the buffer protocol (bytearray, NumPy
        array, ...) on an engine that reaches host memory by pointer. The object is kept (and, for a
        bytearray, cannot be resized) until the region is unregistered."""
        if not self._backend.host_pointers:
            raise RegionError(
                f"engine {self._backend.name} cannot reach this process's memory through a pointer; "
                "allocate engine memory with alloc() and register that"
            )
        try:
            view = memoryview(obj)
        except TypeError as exc:
            raise RegionError(f"{type(obj).__name__} does not expose its bytes (no buffer protocol)") from exc
        if not view.c_contiguous:
            raise RegionError("the memory is not contiguous: register a contiguous copy")
        if view.nbytes == 0:
            raise RegionError("the object is empty: a region must hold at least one byte")
        if view.readonly and _permissions(perms) & Perm.WRITE:
            raise RegionError("the object is read-only: register it with perms=Perm.READ")
        flat = view.cast("B")
        return self._add(_address_of(flat), view.nbytes, perms, region, keep=(obj, flat))

    def register_unsafe(
        self,
        addr: int,
        size: int,
        *,
        perms: Perm = Perm.READ | Perm.WRITE,
        region: int | None = None,
        keep: object = None,
    ) -> RegionHandle:
        """Register a raw bus address range that arkdma cannot check. Unsafe: the caller guarantees the
        memory is mapped for the engine and stays valid until unregister(); the engine will copy into it.
        `keep` (the memory's owner, if any) is held as long as the region."""
        return self._add(_integer("addr", addr), _integer("size", size), perms, region, keep)

    def register_internal(self, buffer: Buffer, perms: Perm) -> RegionHandle:
        """A region of the device's own (completion words): the highest free id, out of users' reach."""
        if not self._backend.owns(buffer):
            raise RegionError("internal regions must be engine memory")
        for rid in reversed(range(self._backend.geometry.num_regions)):
            if rid not in self._regions:
                handle = self._add(buffer.addr, buffer.size, perms, rid, keep=buffer)
                self._internal.add(rid)
                return handle
        raise RegionError(
            f"all {self._backend.geometry.num_regions} region ids are in use; unregister one first"
        )

    def _add(self, addr: int, size: int, perms, region: int | None, keep: object) -> RegionHandle:
        if size <= 0:
            raise RegionError(f"a region must hold at least one byte, not {size}")
        if addr < 0 or addr + size > _U64:
            raise RegionError(f"[{addr:#x}, +{size}) is not a 64-bit bus address range")
        perms = _permissions(perms)
        for other in self._regions.values():
            if addr < other.addr + other.size and other.addr < addr + size:
                raise RegionError(
                    f"[{addr:#x}, {addr + size:#x}) overlaps region {other.id} "
                    f"[{other.addr:#x}, {other.addr + other.size:#x}); copies between aliases would be undefined"
                )
        if region is None:
            region = self._free_id()
        else:
            region = _integer("region", region)
            if region in self._regions:
                raise RegionError(f"region id {region} is taken; unregister it first")
            if not 0 <= region < self._backend.geometry.num_regions:
                raise RegionError(f"region id {region} is outside 0..{self._backend.geometry.num_regions - 1}")
        handle = RegionHandle(region, addr, size, perms)
        self._backend.set_region(region, addr, size, int(perms))
        self._regions[region] = handle
        self._kept[region] = keep
        return handle

    def _free_id(self) -> int:
        for rid in range(self._backend.geometry.num_regions):
            if rid not in self._regions:
                return rid
        raise RegionError(
            f"all {self._backend.geometry.num_regions} region ids are in use; unregister one first"
        )

    # --- removal and lookup -----------------------------------------------------------
    def unregister(self, region: int | RegionHandle) -> None:
        rid = _integer("region", int(region) if isinstance(region, RegionHandle) else region)
        if rid in self._internal:
            raise RegionError(f"region {rid} holds the device's completion words; it goes when the device closes")
        if rid not in self._regions:
            raise RegionError(f"region {rid} is not registered")
        self._remove(rid)

    def _remove(self, rid: int) -> None:
        self._backend.clear_region(rid)
        del self._regions[rid]
        self._kept.pop(rid, None)
        self._internal.discard(rid)

    def forget_all(self) -> None:
        """Drop the bookkeeping (and the memory kept) once the engine's table is gone (reset or close)."""
        self._regions.clear()
        self._kept.clear()
        self._internal.clear()

    def is_internal(self, region: int) -> bool:
        return region in self._internal

    @property
    def internal_ids(self) -> frozenset[int]:
        return frozenset(self._internal)

    def __getitem__(self, region: int) -> RegionHandle:
        return self._regions[region]

    def __iter__(self):
        return iter(h for h in self._regions.values() if h.id not in self._internal)

    def __len__(self) -> int:
        return len(self._regions) - len(self._internal)


def _address_of(view: memoryview) -> int:
    """Where a buffer's bytes live in this process (NumPy reads it for writable and read-only buffers)."""
    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data)
