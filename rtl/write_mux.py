"""WriteMux: merges the data writes and the completion-word writes onto the one AXI write channel, in order."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from rtl.axi import Burst, axi_channels, size_code
from rtl.head_fifo import HeadFIFO
from rtl.params import ADDR_WIDTH
from rtl.records import write_source_signature

W_ORDER = 4  # bursts whose address went out before their data


class WriteMux(wiring.Component):
    """Every write uses AXI ID 0, so responses come back in address order, and a completion word
    written after the response of the data it covers lands after that data. Completion words win
    the address channel when both ask (a grant holds until its address is taken)."""

    def __init__(self, *, data_width: int, id_width: int, writes_outstanding: int, w_with_aw: bool = True):
        self.data_width, self.writes_outstanding = data_width, writes_outstanding
        self.w_with_aw = w_with_aw
        super().__init__({
            "data": In(write_source_signature(data_width)),
            "cw": In(write_source_signature(data_width)),
            # the AXI write channels of the engine's master port (`id_width`: its ID bits; every write uses 0)
            "mem": Out(axi_channels(ADDR_WIDTH, data_width, id_width, "aw", "w", "b")),
            "stall_write": Out(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        if self.w_with_aw:
            worder = m.submodules.worder = SyncFIFO(width=1, depth=W_ORDER)
        else:
            # the same cycles as the SyncFIFO, its oldest entry (which source's W goes next) from a register, not
            # from the LUT-RAM's output: W's ready to the write-data generator starts at registers
            head = m.submodules.worder = HeadFIFO(1, W_ORDER)
            worder = _FIFOPorts(head)
        border = m.submodules.border = SyncFIFOBuffered(width=1, depth=self.writes_outstanding)
        d, c, mem = self.data, self.cw, self.mem

        locked = Signal()
        locked_sel = Signal()
        sel = Signal()  # 1: completion writer
        m.d.comb += sel.eq(Mux(locked, locked_sel, c.aw.valid))
        room = Signal()
        m.d.comb += room.eq(worder.w_rdy & border.w_rdy)
        m.d.comb += [
            mem.awvalid.eq(Mux(sel, c.aw.valid, d.aw.valid) & room),
            mem.awaddr.eq(Mux(sel, c.aw.payload.addr, d.aw.payload.addr)),
            mem.awlen.eq(Mux(sel, c.aw.payload.len, d.aw.payload.len)),
            mem.awsize.eq(size_code(self.data_width)), mem.awburst.eq(Burst.INCR), mem.awcache.eq(0b0011),
            c.aw.ready.eq(sel & room & mem.awready),
            d.aw.ready.eq(~sel & room & mem.awready),
        ]
        taken = Signal()
        m.d.comb += taken.eq(mem.awvalid & mem.awready)
        m.d.comb += [worder.w_data.eq(sel), border.w_en.eq(taken), border.w_data.eq(sel)]
        with m.If(taken):
            m.d.sync += locked.eq(0)
        with m.Elif(mem.awvalid):
            m.d.sync += [locked.eq(1), locked_sel.eq(sel)]

        # W follows the order of the addresses; with w_with_aw and none waiting, the burst whose address is taken
        # now may send its first beat in the same cycle (a burst that ends with it is not kept in the order)
        if self.w_with_aw:
            direct = Signal()
            m.d.comb += [direct.eq(~worder.r_rdy & taken),
                         worder.w_en.eq(taken & ~(~worder.r_rdy & mem.wvalid & mem.wready & mem.wlast))]
            wsel = Mux(worder.r_rdy, worder.r_data[0], sel)
            w_open = worder.r_rdy | direct
        else:
            m.d.comb += worder.w_en.eq(taken)
            wsel = worder.r_data[0]
            w_open = worder.r_rdy
        m.d.comb += [
            mem.wvalid.eq(w_open & Mux(wsel, c.w.valid, d.w.valid)),
            mem.wdata.eq(Mux(wsel, c.w.payload.data, d.w.payload.data)),
            mem.wstrb.eq(Mux(wsel, c.w.payload.strb, d.w.payload.strb)),
            mem.wlast.eq(Mux(wsel, c.w.payload.last, d.w.payload.last)),
            c.w.ready.eq(w_open & wsel & mem.wready),
            d.w.ready.eq(w_open & ~wsel & mem.wready),
            worder.r_en.eq(worder.r_rdy & mem.wvalid & mem.wready & mem.wlast),
        ]

        bsel = border.r_data[0]
        m.d.comb += [
            mem.bready.eq(border.r_rdy & Mux(bsel, c.b.ready, d.b.ready)),
            c.b.valid.eq(border.r_rdy & bsel & mem.bvalid), c.b.payload.eq(mem.bresp),
            d.b.valid.eq(border.r_rdy & ~bsel & mem.bvalid), d.b.payload.eq(mem.bresp),
            border.r_en.eq(mem.bvalid & mem.bready),
        ]
        m.d.comb += [
            self.stall_write.eq((mem.awvalid & ~mem.awready) | (mem.wvalid & ~mem.wready)),
            self.idle.eq((border.level == 0) & ~worder.r_rdy),
        ]
        return m


class _FIFOPorts:
    """A HeadFIFO's stream ports under SyncFIFO's names (w_en, w_data, w_rdy, r_en, r_data, r_rdy)."""

    def __init__(self, fifo: HeadFIFO):
        self.w_en, self.w_data, self.w_rdy = fifo.w.valid, fifo.w.payload, fifo.w.ready
        self.r_en, self.r_data, self.r_rdy = fifo.r.ready, fifo.r.payload, fifo.r.valid
