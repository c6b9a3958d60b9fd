"""FallThroughFIFO: a SyncFIFO whose output shows the input in the cycle it arrives while the FIFO is empty, a cycle
sooner than SyncFIFO's own output."""

from __future__ import annotations

from amaranth import Module, Mux
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out


class FallThroughFIFO(wiring.Component):
    """`w` is taken whenever the FIFO has room (its ready does not wait on `r`). With the FIFO empty, `r` shows the
    entry on `w` in the same cycle: taken then, it is not stored; not taken (or taken over several cycles by a
    reader that holds it, as the write-data generator does), it is stored and shown from the FIFO from the next
    cycle on, unchanged."""

    def __init__(self, width: int, depth: int):
        if depth < 2:
            raise ValueError(f"depth must be at least 2 (a depth-1 SyncFIFO runs at half rate), not {depth}")
        self.width, self.depth = width, depth
        super().__init__({"w": In(stream.Signature(width)), "r": Out(stream.Signature(width)), "level": Out(range(depth + 1))})

    def elaborate(self, platform):
        m = Module()
        fifo = m.submodules.fifo = SyncFIFO(width=self.width, depth=self.depth)
        empty = ~fifo.r_rdy
        m.d.comb += [
            self.w.ready.eq(fifo.w_rdy),
            self.r.valid.eq(fifo.r_rdy | self.w.valid),
            self.r.payload.eq(Mux(empty, self.w.payload, fifo.r_data)),
            fifo.w_data.eq(self.w.payload),
            fifo.w_en.eq(self.w.valid & ~(empty & self.r.ready)),
            fifo.r_en.eq(fifo.r_rdy & self.r.ready),
            self.level.eq(fifo.level),
        ]
        return m
