"""Descriptors as Python values: build, pack to the 32-byte ABI layout, unpack."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from driver.abi import DESCRIPTOR, DESCRIPTOR_BYTES, Flag

_FORMAT_CHARS = {8: "B", 16: "H", 32: "I", 64: "Q"}
_STRUCT = struct.Struct("<" + "".join(_FORMAT_CHARS[f.bits] for f in DESCRIPTOR.fields))
assert _STRUCT.size == DESCRIPTOR_BYTES, "descriptor fields must tile 32 bytes with no gap"


@dataclass(frozen=True)
class Descriptor:
    """One copy request: `length` bytes from (src_region, src_offset) to (dst_region, dst_offset)."""

    src_region: int = 0
    src_offset: int = 0
    dst_region: int = 0
    dst_offset: int = 0
    length: int = 0
    flags: int = 0
    cookie: int = 0
    reserved: int = 0

    def __post_init__(self) -> None:
        for f in DESCRIPTOR.fields:
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"descriptor field {f.name} must be an int, not {type(value).__name__} {value!r}")
            if not 0 <= value < 1 << f.bits:
                raise ValueError(f"descriptor field {f.name}={value} does not fit in {f.bits} bits")

    @classmethod
    def immediate(cls, dst_region: int, dst_offset: int, value: int, *, flags: int = 0, cookie: int = 0):
        """Write the 64-bit `value` to (dst_region, dst_offset): the signal after data."""
        return cls(0, value, dst_region, dst_offset, 8, flags | Flag.IMM, cookie)

    def pack(self) -> bytes:
        return _STRUCT.pack(*(getattr(self, f.name) for f in DESCRIPTOR.fields))

    @classmethod
    def unpack(cls, raw: bytes) -> "Descriptor":
        if len(raw) != DESCRIPTOR_BYTES:
            raise ValueError(f"a descriptor is {DESCRIPTOR_BYTES} bytes, not {len(raw)}")
        values = _STRUCT.unpack(raw)
        return cls(**{f.name: v for f, v in zip(DESCRIPTOR.fields, values)})
