"""Realigner: shifts bytes from source lanes to destination lanes across two consecutive buffer rows."""

from __future__ import annotations

from amaranth import Cat, Const, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class Realigner(wiring.Component):
    """Combinational. `out` lane i takes byte (i + shift) of the pair Cat(prev, cur), so a copy whose
    source and destination start in different lanes streams at one beat a cycle.
    `strb` keeps the lanes at or after `first_lane` on the first beat and at or before `last_lane`
    on the last beat of a descriptor."""

    def __init__(self, data_width: int):
        self.data_width = data_width
        lanes = ((data_width // 8) - 1).bit_length() or 1
        super().__init__({
            "prev": In(data_width), "cur": In(data_width), "shift": In(lanes),
            "first": In(1), "first_lane": In(lanes), "last": In(1), "last_lane": In(lanes),
            "out": Out(data_width), "strb": Out(data_width // 8),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.data_width // 8
        ones = Const((1 << n) - 1, n)
        m.d.comb += self.out.eq((Cat(self.prev, self.cur) >> Cat(Const(0, 3), self.shift))[: self.data_width])
        lo = ones << self.first_lane
        hi = ones >> (Const(n - 1, len(self.last_lane)) - self.last_lane)[: len(self.last_lane)]
        m.d.comb += self.strb.eq(ones & (lo | ~self.first.replicate(n)) & (hi | ~self.last.replicate(n)))
        return m


def realign_model(prev: bytes, cur: bytes, shift: int) -> bytes:
    """The Python model the block test compares with."""
    pair = prev + cur
    return pair[shift : shift + len(prev)]


def strobe_model(lanes: int, first: bool, first_lane: int, last: bool, last_lane: int) -> int:
    return sum(1 << i for i in range(lanes) if (not first or i >= first_lane) and (not last or i <= last_lane))
