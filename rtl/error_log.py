"""ErrorLog: the oldest queue halts, kept for the host to read and pop."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from rtl.jobs import errlog_layout


class ErrorLog(wiring.Component):
    """A FIFO of (code, queue, cookie, index). An entry that finds it full is dropped and sets the
    sticky `overflow` flag (cleared only by a reset)."""

    def __init__(self, depth: int):
        self.depth = depth
        super().__init__({
            "push_valid": In(1), "push": In(errlog_layout()),
            "pop": In(1),
            "valid": Out(1), "head": Out(errlog_layout()),
            "overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        fifo = m.submodules.fifo = SyncFIFO(width=errlog_layout().size, depth=self.depth)
        m.d.comb += [
            fifo.w_en.eq(self.push_valid), fifo.w_data.eq(self.push),
            fifo.r_en.eq(self.pop), self.valid.eq(fifo.r_rdy), self.head.eq(fifo.r_data),
        ]
        with m.If(self.push_valid & ~fifo.w_rdy):
            m.d.sync += self.overflow.eq(1)
        return m
