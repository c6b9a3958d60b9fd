"""SubmissionWindows: every queue's window of descriptor slots in block RAM, written through a wide AXI4 slave."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In

from driver.abi import DESCRIPTOR_BYTES, WINDOW_BASE, Flag, Resp, bar_bytes
from rtl.abi_layouts import DescriptorLayout
from rtl.axi import axi_signature
from rtl.records import window_read_signature

B_QUEUE = 4  # write responses waiting for the bridge; lets single-beat bursts arrive back to back


class SubmissionWindows(wiring.Component):
    """The GPU posts descriptors here with posted writes, at the engine's data width, so a 512-bit
    bridge lands two descriptors a cycle. Byte strobes are honoured, so any write size works.

    The port decodes BAR addresses (WINDOW_BASE and up). A write's response is sent only after its
    data is in the window, so a doorbell that follows it in AXI order finds the descriptors there.
    Writes outside the windows are dropped with SLVERR; reads return zeros with SLVERR (the
    windows are write-only). Bursts are treated as INCR.
    """

    def __init__(self, *, num_queues: int, slots: int, data_width: int, id_width: int):
        self.slots, self.data_width, self.id_width = slots, data_width, id_width
        self.addr_width = (bar_bytes(num_queues, slots) - 1).bit_length()
        self.row_bits = max(256, data_width)
        self.row_bytes = self.row_bits // 8
        self.window_bytes = num_queues * slots * DESCRIPTOR_BYTES
        self.depth = self.window_bytes // self.row_bytes
        super().__init__({
            "axi": In(axi_signature(self.addr_width, data_width, id_width)),
            "rd": In(window_read_signature(num_queues, slots)),
        })

    def elaborate(self, platform):
        m = Module()
        a, aw, iw = self.axi, self.addr_width, self.id_width
        dwb = self.data_width // 8
        mem = m.submodules.mem = memory.Memory(shape=self.row_bits, depth=self.depth, init=[])
        wp = mem.write_port(granularity=8)
        rp = mem.read_port()

        # --- write path -------------------------------------------------------------
        active = Signal()
        addr = Signal(aw)
        size = Signal(3)
        wid = Signal(iw)
        err = Signal()
        bq = m.submodules.bq = SyncFIFO(width=iw + 2, depth=B_QUEUE)

        beat = Signal()
        last = Signal()
        m.d.comb += [a.wready.eq(active & bq.w_rdy), beat.eq(a.wvalid & a.wready), last.eq(beat & a.wlast)]
        m.d.comb += a.awready.eq(~active | last)

        word = Signal(aw)
        rel = Signal(aw + 1)
        inside = Signal()
        m.d.comb += [
            word.eq(addr & ~(dwb - 1)),
            rel.eq(word - WINDOW_BASE),
            inside.eq((word >= WINDOW_BASE) & (rel < self.window_bytes)),
        ]
        chunks = self.row_bytes // dwb
        chunk = rel[(dwb - 1).bit_length() : (self.row_bytes - 1).bit_length()] if chunks > 1 else Const(0, 1)
        m.d.comb += [
            wp.addr.eq(rel >> (self.row_bytes - 1).bit_length()),
            wp.data.eq(Cat(*([a.wdata] * chunks))),
            wp.en.eq(Mux(beat & inside, a.wstrb << (chunk * dwb), 0)),
        ]
        with m.If(beat):
            m.d.sync += addr.eq((addr & ~((Const(1, 8) << size) - 1)) + (Const(1, 8) << size))
            with m.If(~inside):
                m.d.sync += err.eq(1)
        m.d.comb += [bq.w_en.eq(last), bq.w_data.eq(Cat(wid, Mux(err | ~inside, Resp.SLVERR, Resp.OKAY)))]
        with m.If(last):
            m.d.sync += active.eq(0)
        with m.If(a.awvalid & a.awready):
            m.d.sync += [active.eq(1), addr.eq(a.awaddr), size.eq(a.awsize), wid.eq(a.awid), err.eq(0)]
        m.d.comb += [a.bvalid.eq(bq.r_rdy), a.bid.eq(bq.r_data[:iw]),
                     a.bresp.eq(bq.r_data[iw:]), bq.r_en.eq(a.bready)]

        # --- read path: answered, never served ----------------------------------------
        ractive = Signal()
        rleft = Signal(8)
        with m.If(~ractive):
            m.d.comb += a.arready.eq(1)
            with m.If(a.arvalid):
                m.d.sync += [ractive.eq(1), rleft.eq(a.arlen), a.rid.eq(a.arid)]
        m.d.comb += [a.rvalid.eq(ractive), a.rdata.eq(0), a.rresp.eq(Resp.SLVERR), a.rlast.eq(rleft == 0)]
        with m.If(a.rvalid & a.rready):
            m.d.sync += rleft.eq(rleft - 1)
            with m.If(rleft == 0):
                m.d.sync += ractive.eq(0)

        # --- the scheduler's read port -------------------------------------------------
        flat = Signal(range(self.window_bytes // DESCRIPTOR_BYTES))
        m.d.comb += flat.eq(self.rd.queue * self.slots + self.rd.slot)
        per_row = self.row_bits // 256
        sel = Signal(range(per_row)) if per_row > 1 else Const(0, 1)
        lane = flat % per_row  # the descriptor's place in its row, for the RAM's word and the FENCE/IMM bit
        m.d.comb += [rp.en.eq(self.rd.en), rp.addr.eq(flat // per_row)]
        if per_row > 1:
            with m.If(self.rd.en):
                m.d.sync += sel.eq(lane)
        m.d.comb += self.rd.desc.eq(rp.data.word_select(sel, 256))

        # --- FENCE and IMM, a bit per slot beside the block RAM ---------------------------
        # The validator's squash of a FENCE or IMM descriptor whose queue still has work in flight starts from a
        # register holding that bit, not from the block RAM's output (slow to come out of the RAM on the ECP5).
        # Written with the flags' low byte, read as the block RAM is (the old value in a cycle that writes it). In LUT
        # RAM, not block RAM: synthesis would otherwise fold the register below into a block RAM's read.
        drain_bits = m.submodules.drain_bits = memory.Memory(shape=per_row, depth=self.depth, init=[],
                                                             attrs={"ram_style": "distributed"})
        dwp = drain_bits.write_port(granularity=1)
        drp = drain_bits.read_port(domain="comb")
        flags_byte = DescriptorLayout["flags"].offset // 8
        enables = []
        for j in range(per_row):
            at = j * DESCRIPTOR_BYTES + flags_byte  # the byte's place in the row, then in its beat
            in_beat = at % dwb
            byte = a.wdata[in_beat * 8 : in_beat * 8 + 8]
            enables.append(beat & inside & (chunk == at // dwb) & a.wstrb[in_beat])
            m.d.comb += dwp.data[j].eq((byte & (Flag.FENCE | Flag.IMM)) != 0)
        m.d.comb += [dwp.addr.eq(wp.addr), dwp.en.eq(Cat(*enables)), drp.addr.eq(rp.addr)]
        with m.If(self.rd.en):
            m.d.sync += self.rd.drain.eq(drp.data.bit_select(lane, 1) if per_row > 1 else drp.data)
        return m
