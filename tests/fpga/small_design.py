"""A small Amaranth design for testing the FPGA flow without the engine: a 64-bit stream FIFO and an adder."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out


class FifoSum(wiring.Component):
    """Buffers a stream in block RAM and sums what leaves it (a carry chain to time)."""

    def __init__(self, width: int = 64, depth: int = 512):
        self.width, self.depth = width, depth
        super().__init__({
            "i": In(stream.Signature(width)),
            "o": Out(stream.Signature(width)),
            "sum": Out(width),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = f = fifo.SyncFIFOBuffered(width=self.width, depth=self.depth)
        m.d.comb += [
            f.w_data.eq(self.i.payload), f.w_en.eq(self.i.valid), self.i.ready.eq(f.w_rdy),
            self.o.payload.eq(f.r_data), self.o.valid.eq(f.r_rdy), f.r_en.eq(self.o.ready),
        ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.sum.eq(self.sum + self.o.payload)
        return m
