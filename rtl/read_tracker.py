"""ReadTracker: lands read data in its buffer rows by AXI ID, and reports how far the buffer is filled, in order."""

from __future__ import annotations

from amaranth import Array, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.axi import Resp
from rtl.params import EngineParams


class ReadTracker(wiring.Component):
    """Beats may come back in any order between IDs (and interleaved); beat k of the burst with ID t
    goes to row base[t] + k. The tracker walks the IDs in issue order and moves `filled` past each
    burst once all its beats are in, so `filled` (registered) is a single in-order pointer: every
    row below it holds good data. Within the oldest burst it also counts the beats already in, so
    writes can start before a long burst has finished.

    A burst answered with an error stops the walk at its first row (`fault_valid`, `fault_row`)
    until the write planner acknowledges it; the planner decides whose descriptor failed.
    """

    def __init__(self, p: EngineParams):
        self.p = p
        rp = p.row_ptr_width
        super().__init__({
            "r_valid": In(1), "r_ready": Out(1), "r_id": In(p.read_id_width), "r_data": In(p.data_width),
            "r_resp": In(2),
            "tag_valid": In(1), "tag_alloc": In(p.read_id_width + 1), "tag_base": In(rp), "tag_beats": In(9),
            "tag_free": Out(p.read_id_width + 1),
            "buf_en": Out(1), "buf_addr": Out(range(p.buffer_rows)), "buf_data": Out(p.data_width),
            "filled": Out(rp),
            "fault_valid": Out(1), "fault_row": Out(rp), "fault_ack": In(1),
            "inflight": Out(p.read_id_width + 1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        n = p.reads_outstanding
        rp = p.row_ptr_width
        base = Array(Signal(rp, name=f"base{i}") for i in range(n))
        beats = Array(Signal(9, name=f"beats{i}") for i in range(n))
        recv = Array(Signal(9, name=f"recv{i}") for i in range(n))
        err = Array(Signal(name=f"err{i}") for i in range(n))

        with m.If(self.tag_valid):
            t = self.tag_alloc[: p.read_id_width]
            m.d.sync += [base[t].eq(self.tag_base), beats[t].eq(self.tag_beats)]

        m.d.comb += self.r_ready.eq(1)
        row = Signal(rp)
        m.d.comb += [
            row.eq(base[self.r_id] + recv[self.r_id]),
            self.buf_en.eq(self.r_valid), self.buf_addr.eq(row), self.buf_data.eq(self.r_data),
        ]
        with m.If(self.r_valid):
            m.d.sync += recv[self.r_id].eq(recv[self.r_id] + 1)
            with m.If(self.r_resp != Resp.OKAY):
                m.d.sync += err[self.r_id].eq(1)

        tag_free = Signal(p.read_id_width + 1)
        filled = Signal(rp)
        cur = tag_free[: p.read_id_width]
        outstanding, complete, advance = Signal(), Signal(), Signal()
        m.d.comb += [
            outstanding.eq(tag_free != self.tag_alloc),
            complete.eq(outstanding & (recv[cur] == beats[cur])),
            self.fault_valid.eq(complete & err[cur]),
            self.fault_row.eq(base[cur]),
            advance.eq(complete & (~err[cur] | self.fault_ack)),
            self.tag_free.eq(tag_free),
            self.inflight.eq(self.tag_alloc - tag_free),
        ]
        with m.If(advance):
            m.d.sync += [filled.eq(filled + beats[cur]), tag_free.eq(tag_free + 1),
                         recv[cur].eq(0), err[cur].eq(0)]
        m.d.sync += self.filled.eq(filled + Mux(outstanding & ~err[cur], recv[cur], 0))
        return m
