"""WriteMux: merges the data writes and the completion-word writes onto the one AXI write channel, in order."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from rtl.axi import Burst, size_code
from rtl.params import EngineParams

W_ORDER = 4  # bursts whose address went out before their data


def write_source_signature(data_width: int) -> wiring.Signature:
    """A writer's side of the mux: address (INCR, full-width beats), data, response."""
    return wiring.Signature({
        "aw_valid": Out(1), "aw_ready": In(1), "aw_addr": Out(64), "aw_len": Out(8),
        "w_valid": Out(1), "w_ready": In(1), "w_data": Out(data_width), "w_strb": Out(data_width // 8),
        "w_last": Out(1),
        "b_valid": In(1), "b_ready": Out(1), "b_resp": In(2),
    })


class WriteMux(wiring.Component):
    """Every write uses AXI ID 0, so responses come back in address order, and a completion word
    written after the response of the data it covers lands after that data. Completion words win
    the address channel when both ask (a grant holds until its address is taken)."""

    def __init__(self, p: EngineParams):
        self.p = p
        super().__init__({
            "data": In(write_source_signature(p.data_width)),
            "cw": In(write_source_signature(p.data_width)),
            "aw_valid": Out(1), "aw_ready": In(1), "aw_addr": Out(64), "aw_len": Out(8), "aw_size": Out(3),
            "aw_burst": Out(2), "aw_cache": Out(4),
            "w_valid": Out(1), "w_ready": In(1), "w_data": Out(p.data_width), "w_strb": Out(p.data_bytes),
            "w_last": Out(1),
            "b_valid": In(1), "b_ready": Out(1), "b_resp": In(2),
            "stall_write": Out(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        worder = m.submodules.worder = SyncFIFO(width=1, depth=W_ORDER)
        border = m.submodules.border = SyncFIFOBuffered(width=1, depth=p.writes_outstanding)
        d, c = self.data, self.cw

        locked = Signal()
        locked_sel = Signal()
        sel = Signal()  # 1: completion writer
        m.d.comb += sel.eq(Mux(locked, locked_sel, c.aw_valid))
        room = Signal()
        m.d.comb += room.eq(worder.w_rdy & border.w_rdy)
        m.d.comb += [
            self.aw_valid.eq(Mux(sel, c.aw_valid, d.aw_valid) & room),
            self.aw_addr.eq(Mux(sel, c.aw_addr, d.aw_addr)),
            self.aw_len.eq(Mux(sel, c.aw_len, d.aw_len)),
            self.aw_size.eq(size_code(p.data_width)), self.aw_burst.eq(Burst.INCR), self.aw_cache.eq(0b0011),
            c.aw_ready.eq(sel & room & self.aw_ready),
            d.aw_ready.eq(~sel & room & self.aw_ready),
        ]
        taken = Signal()
        m.d.comb += taken.eq(self.aw_valid & self.aw_ready)
        m.d.comb += [worder.w_en.eq(taken), worder.w_data.eq(sel), border.w_en.eq(taken), border.w_data.eq(sel)]
        with m.If(taken):
            m.d.sync += locked.eq(0)
        with m.Elif(self.aw_valid):
            m.d.sync += [locked.eq(1), locked_sel.eq(sel)]

        wsel = worder.r_data[0]
        m.d.comb += [
            self.w_valid.eq(worder.r_rdy & Mux(wsel, c.w_valid, d.w_valid)),
            self.w_data.eq(Mux(wsel, c.w_data, d.w_data)),
            self.w_strb.eq(Mux(wsel, c.w_strb, d.w_strb)),
            self.w_last.eq(Mux(wsel, c.w_last, d.w_last)),
            c.w_ready.eq(worder.r_rdy & wsel & self.w_ready),
            d.w_ready.eq(worder.r_rdy & ~wsel & self.w_ready),
            worder.r_en.eq(self.w_valid & self.w_ready & self.w_last),
        ]

        bsel = border.r_data[0]
        m.d.comb += [
            self.b_ready.eq(border.r_rdy & Mux(bsel, c.b_ready, d.b_ready)),
            c.b_valid.eq(border.r_rdy & bsel & self.b_valid), c.b_resp.eq(self.b_resp),
            d.b_valid.eq(border.r_rdy & ~bsel & self.b_valid), d.b_resp.eq(self.b_resp),
            border.r_en.eq(self.b_valid & self.b_ready),
        ]
        m.d.comb += [
            self.stall_write.eq((self.aw_valid & ~self.aw_ready) | (self.w_valid & ~self.w_ready)),
            self.idle.eq((border.level == 0) & ~worder.r_rdy),
        ]
        return m
