"""What the requester side of the UltraScale+ PCIe block shares between its parts: the RQ and RC streams' widths
at 256 bits, the request sizes by their Device Control code, the RQ descriptor of a memory request and the byte
enables' place in RQ's tuser."""

from __future__ import annotations

from amaranth import Array, Cat, Const, Mux

RQ_USER_BITS = 62
RC_USER_BITS = 75
MEM_READ, MEM_WRITE = 0, 1
SIZES = (128, 256, 512, 1024, 2048, 4096)  # Max_Payload_Size and Max_Read_Request_Size, by their code
SIZE_CODE_BITS = 3
REQUESTER_DATA_WIDTHS = (64, 128, 256, 512)  # engine beats the requester packs into (and unpacks from) stream beats


def size_code(size: int) -> int:
    """The Device Control encoding of a payload or read request size in bytes."""
    return SIZES.index(size)


def capped(code, ceiling: int):
    """A size code the host set, cut to the card's `ceiling` in bytes (the reserved codes 6 and 7 read as it)."""
    return Mux(code > size_code(ceiling), size_code(ceiling), code)


def size_of(code, ceiling: int, unit: int = 1):
    """The size (in units of `unit` bytes) of a code already capped at `ceiling`."""
    return Array(Const(s // unit, 13) for s in SIZES[:size_code(ceiling) + 1])[code]


def field(value, width: int):
    """`value` zero-extended (or cut) to exactly `width` bits, so the fields after it keep their places."""
    return Cat(value, Const(0, max(0, width - len(value))))[:width]


def rq_header(addr, dwords, kind: int, tag):
    """A 4-DWORD RQ descriptor: address, DWORD count and request type, tag (requester ID from the block)."""
    return Cat(Const(0, 2), field(addr[2:], 62), field(dwords, 11), Const(kind, 4), Const(0, 17),
               field(tag, 8), Const(0, 24))


def rq_user(lay, first_be, last_be):
    """RQ's tuser with a request's first and last byte enables in their places (`lay`: a StreamLayout)."""
    return Cat(first_be, Const(0, lay.rq_last_be - 4), last_be)


def lanes_mask(count, lanes: int = 8):
    """The tkeep of a beat whose first `count` lanes (clamped to `lanes`) carry DWORDs."""
    return Array(Const((1 << k) - 1, lanes) for k in range(lanes + 1))[Mux(count > lanes, lanes, count)]
