"""FallThroughFIFO: a FIFO whose output shows the input in the cycle it arrives while the FIFO is empty, a cycle
sooner than SyncFIFO's output."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out


class FallThroughFIFO(wiring.Component):
    """`w` is taken whenever the FIFO has room (its ready does not wait on `r`). With the FIFO empty, `r` shows the
    entry on `w` in the same cycle: taken then, it leaves at once; not taken (or taken over several cycles by a
    reader that holds it, as the write-data generator does), it is shown from the FIFO from the next cycle on,
    unchanged.

    Every entry taken on `w` is written into the storage, even one the reader takes in its own cycle (the read
    pointer then moves past it): the storage's write enable waits only on `w`, never on the reader's `ready`, which
    on the ECP5 estimate ran from the write planner through the write-data generator's take into the enable of
    every LUT-RAM cell of the write entries (a 10.3 ns path with SyncFIFO inside)."""

    def __init__(self, width: int, depth: int):
        if depth < 2 or depth & (depth - 1):
            raise ValueError(f"depth must be a power of two of at least 2, not {depth}")
        self.width, self.depth = width, depth
        super().__init__({"w": In(stream.Signature(width)), "r": Out(stream.Signature(width)), "level": Out(range(depth + 1))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.storage = storage = Memory(shape=self.width, depth=self.depth, init=[])
        wp, rp = storage.write_port(), storage.read_port(domain="comb")
        w_at, r_at = Signal(range(self.depth)), Signal(range(self.depth))
        level = Signal(range(self.depth + 1))
        empty, put, get = Signal(), Signal(), Signal()
        m.d.comb += [
            empty.eq(level == 0),
            self.w.ready.eq(level != self.depth),
            self.r.valid.eq(~empty | self.w.valid),
            self.r.payload.eq(Mux(empty, self.w.payload, rp.data)),
            wp.addr.eq(w_at), wp.data.eq(self.w.payload), wp.en.eq(put),
            rp.addr.eq(r_at),
            put.eq(self.w.valid & self.w.ready),
            get.eq(self.r.valid & self.r.ready),
            self.level.eq(level),
        ]
        m.d.sync += [w_at.eq(w_at + put), r_at.eq(r_at + get), level.eq(level + put - get)]
        return m
