"""FallThroughFIFO: a SyncFIFO whose output shows the input in the cycle it arrives while the FIFO is empty, a cycle
sooner than SyncFIFO's own output (or, built with fall_through=False, the SyncFIFO alone behind the same ports)."""

from __future__ import annotations

from amaranth import Module, Mux
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out


class FallThroughFIFO(wiring.Component):
    """`w` is taken whenever the FIFO has room (its ready does not wait on `r`). With the FIFO empty, `r` shows the
    entry on `w` in the same cycle: taken then, it is not stored; not taken (or taken over several cycles by a
    reader that holds it, as the write-data generator does), it is stored and shown from the FIFO from the next
    cycle on, unchanged. With fall_through=False, a plain SyncFIFO: every entry stored, shown from the next cycle."""

    def __init__(self, width: int, depth: int, fall_through: bool = True):
        if depth < 2:
            raise ValueError(f"depth must be at least 2 (a depth-1 SyncFIFO runs at half rate), not {depth}")
        self.width, self.depth, self.fall_through = width, depth, fall_through
        super().__init__({"w": In(stream.Signature(width)), "r": Out(stream.Signature(width)), "level": Out(range(depth + 1))})

    def elaborate(self, platform):
        m = Module()
        fifo = m.submodules.fifo = SyncFIFO(width=self.width, depth=self.depth)
        m.d.comb += [
            self.w.ready.eq(fifo.w_rdy),
            fifo.w_data.eq(self.w.payload),
            fifo.r_en.eq(fifo.r_rdy & self.r.ready),
            self.level.eq(fifo.level),
        ]
        if not self.fall_through:
            m.d.comb += [self.r.valid.eq(fifo.r_rdy), self.r.payload.eq(fifo.r_data), fifo.w_en.eq(self.w.valid)]
            return m
        empty = ~fifo.r_rdy
        m.d.comb += [
            self.r.valid.eq(fifo.r_rdy | self.w.valid),
            self.r.payload.eq(Mux(empty, self.w.payload, fifo.r_data)),
            fifo.w_en.eq(self.w.valid & ~(empty & self.r.ready)),
        ]
        return m
