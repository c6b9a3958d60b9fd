"""Host-side bookkeeping of memory regions: ids, overlap and permission checks, then the engine's table."""

from __future__ import annotations

from dataclasses import dataclass

from driver.abi import Perm
from driver.backend import Backend, Buffer
from driver.errors import RegionError


@dataclass(frozen=True)
class RegionHandle:
    """A registered region: what a descriptor names as (region, offset)."""

    id: int
    addr: int
    size: int
    perms: Perm

    def __int__(self) -> int:
        return self.id


class RegionTable:
    """Gives out region ids and refuses registrations the engine could not keep safe."""

    def __init__(self, backend: Backend):
        self._backend = backend
        self._regions: dict[int, RegionHandle] = {}

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
        """Register `size` bytes at `offset` into `buffer` (or at bus address `addr`)."""
        if buffer is not None:
            if size is None:
                size = buffer.size - offset
            if offset < 0 or offset + size > buffer.size:
                raise RegionError(
                    f"region [{offset}, {offset + size}) runs outside its buffer of {buffer.size} bytes"
                )
            addr = buffer.addr + offset
        if addr is None or size is None:
            raise RegionError("give a buffer, or both addr= and size=")
        if size <= 0:
            raise RegionError(f"a region must hold at least one byte, not {size}")
        perms = Perm(perms)
        if not perms:
            raise RegionError("a region needs READ, WRITE or both; use unregister() to remove one")
        for other in self._regions.values():
            if addr < other.addr + other.size and other.addr < addr + size:
                raise RegionError(
                    f"[{addr:#x}, {addr + size:#x}) overlaps region {other.id} "
                    f"[{other.addr:#x}, {other.addr + other.size:#x}); copies between aliases would be undefined"
                )
        if region is None:
            region = self._free_id()
        elif region in self._regions:
            raise RegionError(f"region id {region} is taken; unregister it first")
        elif not 0 <= region < self._backend.geometry.num_regions:
            raise RegionError(f"region id {region} is outside 0..{self._backend.geometry.num_regions - 1}")
        handle = RegionHandle(region, addr, size, perms)
        self._backend.set_region(region, addr, size, int(perms))
        self._regions[region] = handle
        return handle

    def _free_id(self) -> int:
        for rid in range(self._backend.geometry.num_regions):
            if rid not in self._regions:
                return rid
        raise RegionError(
            f"all {self._backend.geometry.num_regions} region ids are in use; unregister one first"
        )

    def unregister(self, region: int | RegionHandle) -> None:
        rid = int(region)
        if rid not in self._regions:
            raise RegionError(f"region {rid} is not registered")
        self._backend.clear_region(rid)
        del self._regions[rid]

    def __getitem__(self, region: int) -> RegionHandle:
        return self._regions[region]

    def __iter__(self):
        return iter(self._regions.values())

    def __len__(self) -> int:
        return len(self._regions)
