"""The read path's credits, checked by BMC: the read engine never hands out more buffer rows than the
write side has freed (read data never waits for space, and never overwrites a row not yet written out),
nor more read IDs than `reads_outstanding`, whatever jobs, stops and channel timing it meets.

The environment is free within the contracts of the blocks around the read engine: jobs as the validator
plans them (a copy's first burst within the burst limit, `rlast` exactly when it covers the copy), rows
and IDs returned in order and never before they were handed out."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.hdl import Assert, Assume
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from rtl.records import JobKind, job_layout
from rtl.params import EngineParams
from rtl.read_engine import ReadEngine


class ReadCredits(wiring.Component):
    def __init__(self, p: EngineParams, built: EngineParams | None = None):
        """Checks a read engine built with `built` (default `p`) against the credits of `p`: a mismatch is
        how the tests plant a bug the check must find."""
        self.p, self.built = p, built or p
        super().__init__({
            "job_valid": In(1), "job": In(job_layout(p.queue_bits, p.row_ptr_width)),
            "wjob_ready": In(1), "ar_ready": In(1),
            "hard": In(p.num_queues), "draining": In(p.num_queues), "flush": In(1),
            "give_rows": In(p.row_ptr_width), "give_tags": In(p.read_id_width + 1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        b = self.built
        dut = m.submodules.dut = ReadEngine(num_queues=b.num_queues, data_width=b.data_width,
                                            reads_outstanding=b.reads_outstanding, buffer_rows=b.buffer_rows,
                                            row_ptr_width=b.row_ptr_width, max_burst_beats=b.max_burst_beats)
        rp, tw = p.row_ptr_width, p.read_id_width + 1
        row_free, tag_free = Signal(rp), Signal(tw)
        job = self.job
        m.d.comb += [
            dut.job.valid.eq(self.job_valid), dut.job.payload.eq(job), dut.wjob.ready.eq(self.wjob_ready),
            dut.ar.arready.eq(self.ar_ready), dut.stops.hard.eq(self.hard), dut.stops.draining.eq(self.draining),
            dut.stops.flush.eq(self.flush), dut.row_free.eq(row_free), dut.tag.free.eq(tag_free),
        ]
        rows_out = Signal(rp)
        tags_out = Signal(tw)
        m.d.comb += [rows_out.eq(dut.row_alloc - row_free), tags_out.eq(dut.tag.alloc - tag_free)]
        # the write side frees rows, the tracker frees IDs: in order, never ahead of what was handed out
        m.d.comb += [Assume(self.give_rows <= rows_out), Assume(self.give_tags <= tags_out)]
        m.d.sync += [row_free.eq(row_free + self.give_rows), tag_free.eq(tag_free + self.give_tags)]
        # jobs as the validator plans them
        with m.If(self.job_valid & (job.kind == JobKind.COPY) & ~job.zero):
            m.d.comb += [
                Assume((job.rbeats >= 1) & (job.rbeats <= p.max_burst_beats) & (job.rbeats <= job.nrows)),
                Assume(job.rlast == (job.rbeats == job.nrows)),
                Assume(job.nrows <= p.buffer_rows),
            ]
        m.d.comb += [
            Assert(rows_out <= p.buffer_rows, "more buffer rows handed out than the buffer holds"),
            Assert(tags_out <= p.reads_outstanding, "more read IDs handed out than reads_outstanding"),
        ]
        with m.If(dut.ar.arvalid):
            m.d.comb += Assert((rows_out + dut.tag.beats) <= p.buffer_rows, "a burst issued without room for its beats")
        return m
