"""Amaranth layouts and register decoding built from driver/abi.py, so no ABI number is typed twice."""

from __future__ import annotations

from amaranth.lib import data

from driver.abi import DESCRIPTOR, Block, Record, Register


def record_layout(record: Record) -> data.StructLayout:
    """A StructLayout whose bit positions are the record's byte offsets (little-endian fields)."""
    fields = sorted(record.fields, key=lambda f: f.offset)
    members, at = {}, 0
    for f in fields:
        if f.offset * 8 != at:
            raise ValueError(f"{record.name}: field {f.name} at byte {f.offset} leaves a gap or overlaps")
        members[f.name] = f.bits
        at += f.bits
    if at != record.size * 8:
        raise ValueError(f"{record.name}: fields cover {at} bits of {record.size * 8}")
    return data.StructLayout(members)


DescriptorLayout = record_layout(DESCRIPTOR)


def field_of(register: Register, name: str) -> tuple[int, int]:
    """(lsb, width) of a named bit field of a register."""
    for b in register.bits:
        if b.name == name:
            return b.lsb, b.width
    raise KeyError(f"register {register.name} has no bit field {name!r}")


def bits_of(block: Block, register: str, name: str) -> slice:
    lsb, width = field_of(block.register(register), name)
    return slice(lsb, lsb + width)
