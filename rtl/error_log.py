"""ErrorLog: the oldest queue halts, kept for the host to read and pop."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from rtl.records import errlog_layout, errlog_push_signature, errlog_read_signature


class ErrorLog(wiring.Component):
    """A FIFO of (code, queue, cookie, index). An entry that finds it full is dropped and sets the
    sticky `overflow` flag (STATUS.ERRLOG_OVERFLOW, write-1-to-clear): `clear_overflow` or a reset
    clears it, popping does not, and a drop in the cycle of a clear leaves it set."""

    def __init__(self, depth: int):
        self.depth = depth
        super().__init__({
            "push": In(errlog_push_signature()),
            "read": Out(errlog_read_signature()),
        })

    def elaborate(self, platform):
        m = Module()
        fifo = m.submodules.fifo = SyncFIFO(width=errlog_layout().size, depth=self.depth)
        m.d.comb += [
            fifo.w_en.eq(self.push.valid), fifo.w_data.eq(self.push.entry),
            fifo.r_en.eq(self.read.pop), self.read.valid.eq(fifo.r_rdy), self.read.head.eq(fifo.r_data),
        ]
        with m.If(self.push.valid & ~fifo.w_rdy):
            m.d.sync += self.read.overflow.eq(1)
        with m.Elif(self.read.clear_overflow):
            m.d.sync += self.read.overflow.eq(0)
        return m
