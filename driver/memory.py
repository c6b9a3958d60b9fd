"""A sparse bus-address memory model: buffers placed at bus addresses, for engines that model memory."""

from __future__ import annotations

import bisect
from dataclasses import dataclass


class MemoryFault(Exception):
    """An access touched a bus address that no buffer backs."""

    def __init__(self, addr: int, length: int):
        super().__init__(f"bus access [{addr:#x}, {addr + length:#x}) is not backed by memory")
        self.addr = addr
        self.length = length


@dataclass
class _Span:
    addr: int
    data: bytearray


class BusMemory:
    """Bytes at bus addresses. Allocation is a bump allocator with page alignment and a gap
    between buffers, so an access that runs past a buffer faults instead of landing in the next."""

    BASE = 0x1_0000_0000
    GAP = 0x1000

    def __init__(self) -> None:
        self._spans: list[_Span] = []
        self._starts: list[int] = []
        self._next = self.BASE

    def alloc(self, size: int, align: int = 4096) -> int:
        if size <= 0:
            raise ValueError(f"buffer size must be positive, not {size}")
        addr = (self._next + align - 1) // align * align
        self._next = addr + size + self.GAP
        self._insert(addr, size)
        return addr

    def hole(self, size: int) -> int:
        """An address range of `size` bytes that no buffer backs (and none ever will)."""
        addr = (self._next + 0xFFFF) & ~0xFFFF
        self._next = addr + size + self.GAP
        return addr

    def _insert(self, addr: int, size: int) -> None:
        i = bisect.bisect(self._starts, addr)
        self._starts.insert(i, addr)
        self._spans.insert(i, _Span(addr, bytearray(size)))

    def _find(self, addr: int, length: int) -> tuple[_Span, int]:
        i = bisect.bisect(self._starts, addr) - 1
        if i >= 0:
            span = self._spans[i]
            off = addr - span.addr
            if off + length <= len(span.data):
                return span, off
        raise MemoryFault(addr, length)

    def backed(self, addr: int, length: int) -> bool:
        if length == 0:
            return True  # an empty access touches no memory
        try:
            self._find(addr, length)
        except MemoryFault:
            return False
        return True

    def read(self, addr: int, length: int) -> bytes:
        if length == 0:
            return b""
        span, off = self._find(addr, length)
        return bytes(span.data[off : off + length])

    def write(self, addr: int, data: bytes) -> None:
        if not data:
            return
        span, off = self._find(addr, len(data))
        span.data[off : off + len(data)] = data
