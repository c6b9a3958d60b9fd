"""ReadEngine: turns copy jobs into AXI read bursts, each with its own ID and its own rows of the data buffer."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rtl.jobs import JobKind, dropped, job_layout, stops_signature
from rtl.params import PAGE_BYTES, EngineParams


class ReadEngine(wiring.Component):
    """Jobs pass through in order to the write planner; a copy first gets its first buffer row
    (`row0`) and row count. Its source is then read in bursts that stop at 4 KiB boundaries and at
    max_burst_beats, aligned down to the data width: burst k fills the next rows of the buffer.
    A burst is issued only when a read ID is free and the buffer has room for all its beats, so read
    data never waits for space. IDs are handed out and returned in order (the read tracker frees
    them), so up to reads_outstanding bursts are in flight and may return in any order.
    A copy whose queue has stopped is passed on as DROP without reading.
    """

    def __init__(self, p: EngineParams):
        self.p = p
        rp = p.row_ptr_width
        super().__init__({
            "job": In(stream.Signature(job_layout(p))),
            "wjob": Out(stream.Signature(job_layout(p))),
            "stops": In(stops_signature(p)),
            "ar_valid": Out(1), "ar_ready": In(1), "ar_id": Out(p.read_id_width), "ar_addr": Out(64),
            "ar_len": Out(8),
            "tag_alloc": Out(p.read_id_width + 1),  # IDs handed out so far (free-running)
            "tag_free": In(p.read_id_width + 1),  # IDs returned by the read tracker
            "tag_base": Out(rp), "tag_beats": Out(9),  # of the burst issued this cycle (ar_valid & ar_ready)
            "row_alloc": Out(rp),  # rows handed out so far (free-running)
            "row_free": In(rp),  # rows the write side has finished with
            "stall_buffer": Out(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        lg = (p.data_bytes - 1).bit_length()
        rp = p.row_ptr_width

        cur_valid = Signal()
        cur_addr = Signal(64)
        rows_left = Signal(rp)
        tag_alloc = Signal(p.read_id_width + 1)
        row_alloc = Signal(rp)

        to_page = Signal(range(PAGE_BYTES // p.data_bytes + 1))
        capped = Signal(9)
        burst = Signal(9)
        m.d.comb += [
            to_page.eq((PAGE_BYTES - cur_addr[: PAGE_BYTES.bit_length() - 1]) >> lg),
            capped.eq(Mux(to_page < p.max_burst_beats, to_page, p.max_burst_beats)),
            burst.eq(Mux(rows_left < capped, rows_left, capped)),
        ]

        tags_used = Signal(p.read_id_width + 1)
        rows_used = Signal(rp)
        tags_ok, rows_ok = Signal(), Signal()
        m.d.comb += [
            tags_used.eq(tag_alloc - self.tag_free),
            rows_used.eq(row_alloc - self.row_free),
            tags_ok.eq(tags_used < p.reads_outstanding),
            rows_ok.eq(rows_used + burst <= p.buffer_rows),
        ]
        fire = Signal()
        m.d.comb += [
            self.ar_valid.eq(cur_valid & tags_ok & rows_ok),
            self.ar_id.eq(tag_alloc[: p.read_id_width]),
            self.ar_addr.eq(cur_addr), self.ar_len.eq(burst - 1),
            fire.eq(self.ar_valid & self.ar_ready),
            self.tag_alloc.eq(tag_alloc), self.tag_base.eq(row_alloc), self.tag_beats.eq(burst),
            self.row_alloc.eq(row_alloc),
            self.stall_buffer.eq(cur_valid & ~(tags_ok & rows_ok)),
        ]
        row_next = Signal(rp)
        m.d.comb += row_next.eq(row_alloc + Mux(fire, burst, 0))
        with m.If(fire):
            m.d.sync += [cur_addr.eq(cur_addr + (burst << lg)), rows_left.eq(rows_left - burst),
                         row_alloc.eq(row_next), tag_alloc.eq(tag_alloc + 1)]
            with m.If(rows_left == burst):
                m.d.sync += cur_valid.eq(0)

        job, wj = self.job.payload, self.wjob.payload
        stopped = Signal()
        reads = Signal()
        free_slot = Signal()
        nrows = Signal(rp)
        m.d.comb += [
            stopped.eq(dropped(self.stops, job.queue, job.index, started=False) & ((job.kind == JobKind.COPY) | (job.kind == JobKind.IMM))),
            reads.eq((job.kind == JobKind.COPY) & (job.length != 0) & ~stopped),
            free_slot.eq(~cur_valid | (fire & (rows_left == burst))),
            nrows.eq((job.src_addr[:lg] + job.length + (p.data_bytes - 1)) >> lg),
            self.job.ready.eq(self.wjob.ready & (~reads | free_slot)),
            self.wjob.valid.eq(self.job.valid & (~reads | free_slot)),
            wj.eq(job),
            wj.row0.eq(row_next),
            wj.nrows.eq(Mux(reads, nrows, 0)),
        ]
        with m.If(stopped):
            m.d.comb += wj.kind.eq(JobKind.DROP)
        with m.If(self.job.valid & self.job.ready & reads):
            m.d.sync += [cur_valid.eq(1), cur_addr.eq(job.src_addr & ~(p.data_bytes - 1)), rows_left.eq(nrows)]
        m.d.comb += self.idle.eq(~cur_valid & (tag_alloc == self.tag_free))
        return m
