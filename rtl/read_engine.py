"""ReadEngine: turns copy jobs into AXI read bursts, each with its own ID and its own rows of the data buffer."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rtl import bursts
from rtl.axi import Burst, axi_channels, size_code
from rtl.params import ADDR_WIDTH, index_bits
from rtl.records import JobKind, job_layout, read_tag_signature, stops_signature


class ReadEngine(wiring.Component):
    """Jobs pass through in order to the write planner; a copy first gets its first buffer row
    (`row0`) and row count. Its source is then read in bursts that stop at 4 KiB boundaries and at
    max_burst_beats, aligned down to the data width: burst k fills the next rows of the buffer.
    A burst is issued only when a read ID is free and the buffer has room for all its beats, so read
    data never waits for space. IDs are handed out and returned in order (the read tracker frees
    them), so up to reads_outstanding bursts are in flight and may return in any order.
    A copy whose queue has stopped is passed on as DROP without reading.
    """

    def __init__(self, *, num_queues: int, data_width: int, reads_outstanding: int, buffer_rows: int,
                 row_ptr_width: int, max_burst_beats: int):
        self.data_width, self.reads_outstanding, self.buffer_rows = data_width, reads_outstanding, buffer_rows
        self.row_ptr_width, self.max_burst_beats = row_ptr_width, max_burst_beats
        self.id_width = index_bits(reads_outstanding)
        rp = row_ptr_width
        job = stream.Signature(job_layout(index_bits(num_queues), rp))
        super().__init__({
            "job": In(job),
            "wjob": Out(job),
            "stops": In(stops_signature(num_queues)),
            "ar": Out(axi_channels(ADDR_WIDTH, data_width, self.id_width, "ar")),
            "tag": Out(read_tag_signature(self.id_width, rp)),  # the burst issued this cycle; IDs handed out and returned
            "row_alloc": Out(rp),  # rows handed out so far (free-running)
            "row_free": In(rp),  # rows the write side has finished with
            "stall_buffer": Out(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        db, iw, rp = self.data_width // 8, self.id_width, self.row_ptr_width
        pgw = bursts.page_bits(db)

        cur_valid = Signal()
        tag_alloc = Signal(iw + 1)
        row_alloc = Signal(rp)
        alloc_low = Signal(rp, init=-self.buffer_rows % (1 << rp))  # row_alloc - buffer_rows
        # The next burst is planned a cycle ahead: its beats, address, the rows allocated after it (`after`,
        # and `low` = after - buffer_rows, which row_free must reach), and the state after it (g_*).
        c_beats, c_last, c_addr = Signal(bursts.BEATS_BITS), Signal(), Signal(64)
        c_after, c_low = Signal(rp), Signal(rp)
        # c_low and alloc_low plus the largest burst, kept beside them for `rows_ok` (below)
        c_lowmax = Signal(rp)
        alloc_lowmax = Signal(rp, init=(self.max_burst_beats - self.buffer_rows) % (1 << rp))
        g_pg, g_left, g_addr = Signal(pgw), Signal(rp), Signal(64)

        # Whether an ID is free and the buffer has room for the burst, from registers: each is decided a cycle
        # ahead for the state the next cycle will have (below), against the returned IDs and freed rows of this
        # one. Both only grow, so a flag is never early; one returned in a cycle is seen the next. AR valid then
        # starts from registers, not from two subtractions before the job queue's take and its enables.
        tags_ok, rows_ok = Signal(), Signal()
        fire = Signal()
        m.d.comb += [
            self.ar.arvalid.eq(cur_valid & tags_ok & rows_ok),
            self.ar.arid.eq(tag_alloc[:iw]),
            self.ar.araddr.eq(c_addr), self.ar.arlen.eq(c_beats - 1),
            self.ar.arsize.eq(size_code(self.data_width)), self.ar.arburst.eq(Burst.INCR), self.ar.arcache.eq(0b0011),
            fire.eq(self.ar.arvalid & self.ar.arready),
            self.tag.valid.eq(fire), self.tag.alloc.eq(tag_alloc), self.tag.base.eq(row_alloc),
            self.tag.beats.eq(c_beats),
            self.row_alloc.eq(row_alloc),
            self.stall_buffer.eq(cur_valid & ~(tags_ok & rows_ok)),
        ]
        next_cut = bursts.cut(m, self.max_burst_beats, g_pg, g_left)
        next_beats, next_last = next_cut.beats, next_cut.last
        with m.If(fire):
            m.d.sync += [row_alloc.eq(c_after), alloc_low.eq(c_low), alloc_lowmax.eq(c_lowmax),
                         c_lowmax.eq(c_lowmax + next_beats), tag_alloc.eq(tag_alloc + 1),
                         c_beats.eq(next_beats), c_last.eq(next_last), c_addr.eq(g_addr),
                         c_after.eq(c_after + next_beats), c_low.eq(c_low + next_beats),
                         g_pg.eq(g_pg - next_beats), g_left.eq(g_left - next_beats),
                         g_addr.eq(bursts.advance_by_cut(g_addr, next_cut, g_pg, g_left, self.max_burst_beats, db))]
            with m.If(c_last):
                m.d.sync += cur_valid.eq(0)

        job, wj = self.job.payload, self.wjob.payload
        stopped = Signal()
        copies, reads = Signal(), Signal()
        free_slot = Signal()
        row_next, low_next = Signal(rp), Signal(rp)
        m.d.comb += [
            row_next.eq(Mux(fire, c_after, row_alloc)),
            low_next.eq(Mux(fire, c_low, alloc_low)),
            # what the validator let pass can only have been stopped since from behind (or disabled, flushed)
            stopped.eq((self.stops.hard.bit_select(job.queue, 1) | self.stops.draining.bit_select(job.queue, 1)
                        | self.stops.flush) & ((job.kind == JobKind.COPY) | (job.kind == JobKind.IMM))),
            # A copy waits for the slot whether or not its queue has stopped: the stop (from the queue table, far
            # off) then only decides what is passed on and whether the slot fills, never whether the job queue
            # pops or the slot's registers load. A stop never clears while its jobs are in flight, so a stopped
            # copy that waits is still stopped when it passes, as DROP, as it would have passed at once.
            copies.eq((job.kind == JobKind.COPY) & ~job.zero),
            reads.eq(copies & ~stopped),
            free_slot.eq(~cur_valid | (fire & c_last)),
            self.job.ready.eq(self.wjob.ready & (~copies | free_slot)),
            self.wjob.valid.eq(self.job.valid & (~copies | free_slot)),
            wj.eq(job),
            wj.row0.eq(row_next),
            wj.nrows.eq(Mux(reads, job.nrows, 0)),
        ]
        with m.If(stopped):
            m.d.comb += wj.kind.eq(JobKind.DROP)
        take = Signal()
        m.d.comb += take.eq(self.job.valid & self.job.ready & copies)
        with m.If(take):
            # the validator planned the first burst (rbeats, rlast; within its 4 KiB page, so `advance` applies); a
            # stopped copy loads the registers but leaves the slot empty, so nothing is read for it and what it
            # loaded is never used
            m.d.sync += [cur_valid.eq(~stopped), c_beats.eq(job.rbeats), c_last.eq(job.rlast),
                         c_addr.eq(job.src_addr & ~(db - 1)),
                         c_after.eq(row_next + job.rbeats), c_low.eq(low_next + job.rbeats),
                         c_lowmax.eq(Mux(fire, c_lowmax, alloc_lowmax) + job.rbeats),
                         g_pg.eq(bursts.to_page(db, job.src_addr) - job.rbeats), g_left.eq(job.nrows - job.rbeats),
                         g_addr.eq(bursts.advance(job.src_addr & ~(db - 1), job.rbeats, db))]

        def room(low):
            return ~(self.row_free - low)[rp - 1]

        m.d.sync += [
            tags_ok.eq(Mux(fire, (tag_alloc + 1 - self.tag.free)[: iw + 1] < self.reads_outstanding,
                           (tag_alloc - self.tag.free)[: iw + 1] < self.reads_outstanding)),
            # for c_low of the next cycle: where it moves (a fire, a new job), with the burst taken as the largest,
            # so that each candidate is one subtraction from registers. A burst that fits only because it is shorter
            # waits a cycle, when the flag is computed from c_low as it stands.
            rows_ok.eq(Mux(fire, room(c_lowmax), Mux(take, room(alloc_lowmax), room(c_low)))),
        ]
        m.d.comb += self.idle.eq(~cur_valid & (tag_alloc == self.tag.free))
        return m
