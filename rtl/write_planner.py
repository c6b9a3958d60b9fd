"""WritePlanner: splits each job's destination into AXI write bursts and issues a burst once its data is in the buffer."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from driver.abi import ErrorCode
from rtl.jobs import INDEX_BITS, JobKind, WKind, centry_layout, dropped, job_layout, stops_signature, wentry_layout
from rtl.params import PAGE_BYTES, EngineParams


class WritePlanner(wiring.Component):
    """Jobs are taken in the order the read engine issued their reads. For each copy the destination
    is cut into bursts (at 4 KiB and max_burst_beats); a burst's address goes out only when every
    buffer row its beats need is filled (so a write never waits for read data mid-burst, and a read
    error is known before a byte of the burst is written). Each burst gets an entry for the
    write-data generator (which rows, how to realign them) and one for the completion unit (wait for
    this response; the last one also retires the descriptor).

    Read errors: when the tracker's walk stops at a failed burst inside the rows the next burst needs,
    the descriptor fails with BUS_ERROR (bursts already sent stay written: the ABI allows a partial
    destination) and its queue stops. Failures of rows before the current job belong to jobs already
    dropped or failed and are simply acknowledged. A job whose queue has stopped is retired as dropped
    and its rows are freed without writing.
    """

    def __init__(self, p: EngineParams):
        self.p = p
        rp = p.row_ptr_width
        super().__init__({
            "wjob": In(stream.Signature(job_layout(p))),
            "stops": In(stops_signature(p)),
            "filled": In(rp), "row_alloc": In(rp),
            "fault_valid": In(1), "fault_row": In(rp), "fault_ack": Out(1),
            "aw_valid": Out(1), "aw_ready": In(1), "aw_addr": Out(64), "aw_len": Out(8),
            "went": Out(stream.Signature(wentry_layout(p))),
            "cent": Out(stream.Signature(centry_layout(p))),
            "stop_valid": Out(1), "stop_queue": Out(p.queue_bits), "stop_index": Out(INDEX_BITS),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        rp = p.row_ptr_width
        dwb = p.data_bytes
        lg = (dwb - 1).bit_length()
        lanes = lg or 1

        cur_valid = Signal()
        cur = Signal(job_layout(p))
        dst = Signal(64)  # next burst's address, aligned down to the data width
        beats_left = Signal(rp)
        j = Signal(rp)  # descriptor beat index of the next burst's first beat
        first = Signal()
        # source lane < destination lane: beat j needs rows j-1 and j; same lane: row j alone; else j and j+1
        b_neg = Signal()
        shift, first_lane, last_lane = Signal(lanes), Signal(lanes), Signal(lanes)

        # --- the next burst of the current copy -------------------------------------------
        to_page = Signal(range(PAGE_BYTES // dwb + 1))
        capped, beats = Signal(9), Signal(9)
        m.d.comb += [
            to_page.eq((PAGE_BYTES - dst[: PAGE_BYTES.bit_length() - 1]) >> lg),
            capped.eq(Mux(to_page < p.max_burst_beats, to_page, p.max_burst_beats)),
            beats.eq(Mux(beats_left < capped, beats_left, capped)),
        ]
        last_burst = Signal()
        need = Signal(rp)  # the highest row (relative to row0) the burst reads
        reach = Signal(rp)
        m.d.comb += [
            last_burst.eq(beats == beats_left),
            reach.eq(j + beats - (b_neg | (shift == 0))),
            need.eq(Mux(reach < cur.nrows - 1, reach, cur.nrows - 1)),
        ]
        have = Signal(rp)
        fault_rel = Signal(rp)
        ready_rows, fault_here = Signal(), Signal()
        m.d.comb += [
            have.eq(self.filled - cur.row0),
            fault_rel.eq(self.fault_row - cur.row0),
            ready_rows.eq(~have[-1] & (have > need)),
            fault_here.eq(self.fault_valid & ~fault_rel[-1] & (fault_rel <= need)),
        ]

        # --- AW register ----------------------------------------------------------------
        aw_free = Signal()
        m.d.comb += aw_free.eq(~self.aw_valid | self.aw_ready)
        with m.If(self.aw_ready):
            m.d.sync += self.aw_valid.eq(0)

        # --- what the current job does this cycle ------------------------------------------
        stopped = Signal()
        m.d.comb += stopped.eq(dropped(self.stops, cur.queue, cur.index, started=True))
        we, ce = self.went.payload, self.cent.payload
        m.d.comb += [
            ce.queue.eq(cur.queue), ce.index.eq(cur.index), ce.cookie.eq(cur.cookie), ce.code.eq(cur.code),
            ce.notify.eq(cur.notify), ce.length.eq(cur.length),
            we.row0.eq(cur.row0), we.nrows.eq(cur.nrows), we.first.eq(first), we.last.eq(last_burst),
            we.preload.eq(~b_neg & (shift != 0) & (cur.nrows != 0)), we.shift.eq(shift),
            we.first_lane.eq(first_lane), we.last_lane.eq(last_lane), we.imm.eq(cur.src_addr),
        ]
        finish = Signal()
        fail_ack = Signal()
        issue = Signal()
        with m.If(cur_valid):
            with m.If(cur.kind == JobKind.ERROR):
                m.d.comb += [ce.marker.eq(1), self.cent.valid.eq(1), finish.eq(self.cent.ready)]
            with m.Elif((cur.kind == JobKind.DROP) | stopped):
                m.d.comb += [ce.marker.eq(1), ce.dropped.eq(1), we.kind.eq(WKind.DISCARD),
                             self.cent.valid.eq(self.went.ready | (cur.nrows == 0)),
                             self.went.valid.eq(self.cent.ready & (cur.nrows != 0)),
                             finish.eq(self.cent.ready & (self.went.ready | (cur.nrows == 0)))]
            with m.Elif(cur.kind == JobKind.IMM):
                m.d.comb += [ce.burst.eq(1), ce.marker.eq(1), we.kind.eq(WKind.IMM), we.beats.eq(1),
                             we.first_lane.eq(cur.dst_addr[:lg] if lg else 0),
                             issue.eq(aw_free & self.went.ready & self.cent.ready),
                             self.cent.valid.eq(issue), self.went.valid.eq(issue), finish.eq(issue)]
                with m.If(issue):
                    m.d.sync += [self.aw_valid.eq(1), self.aw_addr.eq(cur.dst_addr & ~(dwb - 1)), self.aw_len.eq(0)]
            with m.Elif(cur.length == 0):
                m.d.comb += [ce.marker.eq(1), self.cent.valid.eq(1), finish.eq(self.cent.ready)]
            with m.Elif(fault_here):
                m.d.comb += [ce.marker.eq(1), ce.code.eq(ErrorCode.BUS_ERROR), we.kind.eq(WKind.DISCARD),
                             self.cent.valid.eq(self.went.ready), self.went.valid.eq(self.cent.ready),
                             finish.eq(self.cent.ready & self.went.ready)]
                m.d.comb += fail_ack.eq(finish)
                m.d.comb += [self.stop_valid.eq(finish), self.stop_queue.eq(cur.queue), self.stop_index.eq(cur.index)]
            with m.Else():
                m.d.comb += [ce.burst.eq(1), ce.marker.eq(last_burst), we.kind.eq(WKind.BURST), we.beats.eq(beats),
                             issue.eq(ready_rows & aw_free & self.went.ready & self.cent.ready),
                             self.cent.valid.eq(issue), self.went.valid.eq(issue), finish.eq(issue & last_burst)]
                with m.If(issue):
                    m.d.sync += [self.aw_valid.eq(1), self.aw_addr.eq(dst), self.aw_len.eq(beats - 1),
                                 dst.eq(dst + (beats << lg)), beats_left.eq(beats_left - beats),
                                 j.eq(j + beats), first.eq(0)]
        with m.If(finish):
            m.d.sync += cur_valid.eq(0)

        # --- faults of rows before the current job: acknowledge --------------------------------
        ref = Signal(rp)
        old = Signal(rp)
        m.d.comb += [
            ref.eq(Mux(cur_valid, cur.row0, Mux(self.wjob.valid, self.wjob.payload.row0, self.row_alloc))),
            old.eq(self.fault_row - ref),
            self.fault_ack.eq(fail_ack | (self.fault_valid & old[-1])),
        ]

        # --- load the next job -----------------------------------------------------------------
        nj = self.wjob.payload
        do_lane = nj.dst_addr[:lg] if lg else 0
        so_lane = nj.src_addr[:lg] if lg else 0
        m.d.comb += self.wjob.ready.eq(~cur_valid | finish)
        with m.If(self.wjob.valid & self.wjob.ready):
            m.d.sync += [
                cur_valid.eq(1), cur.eq(nj), first.eq(1), j.eq(0),
                dst.eq(nj.dst_addr & ~(dwb - 1)),
                beats_left.eq((do_lane + nj.length + (dwb - 1)) >> lg),
                b_neg.eq(so_lane < do_lane),
                shift.eq(so_lane - do_lane),
                first_lane.eq(do_lane),
                last_lane.eq(do_lane + nj.length - 1),
            ]
        m.d.comb += self.idle.eq(~cur_valid & ~self.aw_valid)
        return m
