"""HeadFIFO: a SyncFIFO, cycle for cycle, whose oldest entry is shown from a register instead of the LUT-RAM's
asynchronous read."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out


class HeadFIFO(wiring.Component):
    """The ports of `FallThroughFIFO(width, depth, fall_through=False)` and every cycle of the SyncFIFO behind them: `w`
    is taken while fewer than `depth` entries are held, `r` shows the oldest entry from the cycle after it was
    written, `level` counts the entries held. The storage is written at the next free index in every cycle that
    one is free (its write enable is `~full`, a register, not `w.valid`, which in a writer is the end of a
    decision and would otherwise fan out to every LUT-RAM cell); only a push moves the index on, so what is
    written in a cycle without one is overwritten before it is read. The oldest is also held in `head`, loaded
    from the entry after it (read from the storage at a registered address) as the oldest is taken, or from `w`
    while nothing else is held. So `r.valid` and `level` are registers, and so is `r.payload`: all of it, or with
    `slow` (a list of (start, stop) bit ranges of the entry) all but those ranges, which are read from the
    storage at the oldest entry's (registered) index. A reader's decision then ends at the head's enable (the
    bits it holds) and the counters, not at the storage."""

    def __init__(self, width: int, depth: int, slow: list[tuple[int, int]] | None = None):
        if depth < 2:
            raise ValueError(f"depth must be at least 2, not {depth}")
        self.width, self.depth = width, depth
        slow_bits = sorted({b for start, stop in (slow or []) for b in range(start, stop)})
        if slow_bits and (slow_bits[0] < 0 or slow_bits[-1] >= width or len(slow_bits) == width):
            raise ValueError(f"slow bits {slow} must lie within the {width} bits and leave some in the head")
        self.slow_bits = slow_bits
        self.fast_bits = [b for b in range(width) if b not in set(slow_bits)]
        super().__init__({"w": In(stream.Signature(width)), "r": Out(stream.Signature(width)), "level": Out(range(depth + 1))})

    def elaborate(self, platform):
        m = Module()
        depth = self.depth
        fast_w = Cat(self.w.payload[b] for b in self.fast_bits)
        fast = m.submodules.storage = memory.Memory(shape=len(fast_w), depth=depth, init=[])
        wr, rd = fast.write_port(), fast.read_port(domain="comb")

        level = Signal(range(depth + 1))
        more = Signal()  # level >= 2: an entry behind the head is in the storage
        full = Signal()  # level == depth
        head = Signal(len(fast_w))
        head_valid = Signal()  # level != 0
        # where the next entry goes; the head's index, and the entry after it (at wptr while nothing is held)
        wptr, hptr, hptr_next = Signal(range(depth)), Signal(range(depth)), Signal(range(depth))

        def inc(p):
            return Mux(p == depth - 1, 0, p + 1)

        push, pop = Signal(), Signal()
        m.d.comb += [
            self.w.ready.eq(~full),
            self.r.valid.eq(head_valid),
            self.level.eq(level),
            push.eq(self.w.valid & ~full),
            pop.eq(self.r.ready & head_valid),
            wr.en.eq(~full), wr.addr.eq(wptr), wr.data.eq(fast_w),
            rd.addr.eq(hptr_next),
        ]
        m.d.comb += [self.r.payload[b].eq(head[i]) for i, b in enumerate(self.fast_bits)]
        if self.slow_bits:
            slow_w = Cat(self.w.payload[b] for b in self.slow_bits)
            slow = m.submodules.slow_storage = memory.Memory(shape=len(slow_w), depth=depth, init=[])
            swr, srd = slow.write_port(), slow.read_port(domain="comb")
            m.d.comb += [swr.en.eq(~full), swr.addr.eq(wptr), swr.data.eq(slow_w), srd.addr.eq(hptr)]
            m.d.comb += [self.r.payload[b].eq(srd.data[i]) for i, b in enumerate(self.slow_bits)]
        with m.If(push):
            m.d.sync += wptr.eq(inc(wptr))
        # the head: kept until taken; then the entry after it, or `w`'s entry when none is held behind it
        with m.If(~head_valid | pop):
            m.d.sync += head.eq(Mux(more, rd.data, fast_w))
        # the indices move on as the head is loaded with an entry
        with m.If((~head_valid | pop) & (more | push)):
            m.d.sync += [hptr.eq(hptr_next), hptr_next.eq(inc(hptr_next))]
        # the counters (the flags from the level before and the cycle's push and pop, one case each)
        with m.If(push & ~pop):
            m.d.sync += [level.eq(level + 1), head_valid.eq(1), more.eq(head_valid), full.eq(level == depth - 1)]
        with m.Elif(pop & ~push):
            m.d.sync += [level.eq(level - 1), head_valid.eq(more), more.eq(level > 2), full.eq(0)]
        return m
