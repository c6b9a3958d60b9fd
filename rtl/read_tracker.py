"""ReadTracker: lands read data in its buffer rows by AXI ID, and reports how far the buffer is filled, in order."""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from driver.abi import Resp
from rtl.axi import axi_channels
from rtl.params import ADDR_WIDTH, index_bits
from rtl.records import read_fault_signature, read_tag_signature


class ReadTracker(wiring.Component):
    """Beats may come back in any order between IDs (and interleaved); beat k of the burst with ID t
    goes to row base[t] + k. The tracker walks the IDs in issue order and moves `filled` past each
    burst once all its beats are in, so `filled` (registered) is a single in-order pointer: every
    row below it holds good data by the end of the cycle it is shown in. Within the oldest burst it also counts the beats already in, so
    writes can start before a long burst has finished.

    A burst answered with an error stops the walk at its first row (`fault_valid`, `fault_row`)
    until the write planner acknowledges it; the planner decides whose descriptor failed.
    """

    def __init__(self, *, data_width: int, reads_outstanding: int, buffer_rows: int, row_ptr_width: int):
        self.data_width, self.reads_outstanding = data_width, reads_outstanding
        self.buffer_rows, self.row_ptr_width = buffer_rows, row_ptr_width
        self.id_width = iw = index_bits(reads_outstanding)
        rp = row_ptr_width
        super().__init__({
            "r": Out(axi_channels(ADDR_WIDTH, data_width, iw, "r")),
            "tag": In(read_tag_signature(iw, rp)),
            "buf": In(memory.WritePort.Signature(addr_width=(buffer_rows - 1).bit_length(), shape=data_width)),
            "filled": Out(rp),
            "fault": Out(read_fault_signature(rp)),
            "inflight": Out(iw + 1),
        })

    def elaborate(self, platform):
        m = Module()
        n, rp, iw, dw = self.reads_outstanding, self.row_ptr_width, self.id_width, self.data_width
        aw = (self.buffer_rows - 1).bit_length()
        base = Array(Signal(rp, name=f"base{i}") for i in range(n))
        last = Array(Signal(8, name=f"last{i}") for i in range(n))  # beats - 1
        recv = Array(Signal(9, name=f"recv{i}") for i in range(n))
        ptr = Array(Signal(aw, name=f"ptr{i}") for i in range(n))  # buffer row of the next beat
        err = Array(Signal(name=f"err{i}") for i in range(n))
        done = Array(Signal(name=f"done{i}") for i in range(n))  # every beat is in

        # An ID's entry is written the cycle after its address handshake (and cleared then, so retiring
        # the oldest touches only the pointers); `alloc` counts the entries written.
        t_valid, t_id, t_base, t_beats = Signal(), Signal(iw), Signal(rp), Signal(9)
        alloc = Signal(iw + 1)
        m.d.sync += [t_valid.eq(self.tag.valid), t_id.eq(self.tag.alloc[:iw]),
                     t_base.eq(self.tag.base), t_beats.eq(self.tag.beats), alloc.eq(self.tag.alloc)]
        with m.If(t_valid):
            m.d.sync += [base[t_id].eq(t_base), last[t_id].eq(t_beats - 1), ptr[t_id].eq(t_base[:aw]),
                         recv[t_id].eq(0), err[t_id].eq(0), done[t_id].eq(0)]

        # Beats: A registers the port (a beat comes at least a cycle after its address handshake, so it
        # finds its entry written) and reads its ID's entry; B writes the data and the updated entry.
        # When B's previous beat had the same ID, A's read missed that update: B forwards it.
        a_valid, a_id, a_data, a_resp = Signal(), Signal(iw), Signal(dw), Signal(2)
        m.d.sync += [a_valid.eq(self.r.rvalid), a_id.eq(self.r.rid), a_data.eq(self.r.rdata), a_resp.eq(self.r.rresp)]
        b_valid, b_id, b_data, b_resp, b_fwd = Signal(), Signal(iw), Signal(dw), Signal(2), Signal()
        b_ptr, b_recv, b_last = Signal(aw), Signal(9), Signal(8)
        f_ptr, f_recv = Signal(aw), Signal(9)  # B's updated values, for the next beat
        m.d.sync += [b_valid.eq(a_valid), b_id.eq(a_id), b_data.eq(a_data), b_resp.eq(a_resp),
                     b_fwd.eq(b_valid & (b_id == a_id)),
                     b_ptr.eq(ptr[a_id]), b_recv.eq(recv[a_id]), b_last.eq(last[a_id])]
        ptr_use, recv_use = Signal(aw), Signal(9)
        m.d.comb += [
            ptr_use.eq(Mux(b_fwd, f_ptr, b_ptr)), recv_use.eq(Mux(b_fwd, f_recv, b_recv)),
            self.r.rready.eq(1),
            self.buf.en.eq(b_valid), self.buf.addr.eq(ptr_use), self.buf.data.eq(b_data),
        ]
        m.d.sync += [f_ptr.eq(ptr_use + 1), f_recv.eq(recv_use + 1)]
        with m.If(b_valid):
            m.d.sync += [recv[b_id].eq(recv_use + 1), ptr[b_id].eq(ptr_use + 1),
                         done[b_id].eq(recv_use == b_last)]
            with m.If(b_resp != Resp.OKAY):
                m.d.sync += err[b_id].eq(1)

        tag_free = Signal(iw + 1)
        filled = Signal(rp)
        cur = tag_free[:iw]
        outstanding, complete, advance = Signal(), Signal(), Signal()
        m.d.comb += [
            outstanding.eq(tag_free != alloc),
            complete.eq(outstanding & done[cur]),
            self.fault.valid.eq(complete & err[cur]),
            self.fault.row.eq(base[cur]),
            advance.eq(complete & (~err[cur] | self.fault.ack)),
            self.tag.free.eq(tag_free),
            self.inflight.eq(self.tag.alloc - tag_free),
        ]
        not_last = Signal(rp)  # -beats = ~(beats - 1): one subtraction adds the beats
        m.d.comb += not_last.eq(~Cat(last[cur], Const(0, rp - 8)))
        with m.If(advance):
            m.d.sync += [filled.eq(filled - not_last), tag_free.eq(tag_free + 1)]
        # `filled` (registered) counts the oldest burst's rows written by the end of the cycle it shows them in: the
        # beats already in, the one B writes now and the one A holds (B writes it next cycle), each if good and in
        # order. A burst decided from it reads its rows a cycle later at the earliest, so it finds them written.
        b_here, a_here = Signal(), Signal()
        m.d.comb += [b_here.eq(b_valid & (b_id == cur) & (b_resp == Resp.OKAY)),
                     a_here.eq(a_valid & (a_id == cur) & (a_resp == Resp.OKAY)
                               & ~(b_valid & (b_id == cur) & (b_resp != Resp.OKAY)))]
        # the two beats added to `filled` beside the pick of recv[cur], so one carry chain follows that pick
        base_here = Signal(rp)
        m.d.comb += base_here.eq(filled + b_here + a_here)
        m.d.sync += self.filled.eq(Mux(outstanding & ~err[cur], base_here + recv[cur], filled))
        return m
