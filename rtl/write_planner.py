"""WritePlanner: splits each job's destination into AXI write bursts and issues a burst once its data is in the buffer."""

from __future__ import annotations

from amaranth import Array, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from driver.abi import ErrorCode
from rtl import bursts
from rtl.records import (JobKind, WKind, centry_layout, dropped, event_signature, job_layout, read_fault_signature,
                         stops_signature, wentry_layout, write_address_stream)
from rtl.params import PAGE_BYTES, index_bits


class WritePlanner(wiring.Component):
    """Jobs are taken in the order the read engine issued their reads. For each copy the destination
    is cut into bursts at 4 KiB boundaries and every max_burst_beats from its start (with `write_burst_bytes`, every
    that many bytes from its start, or the host's max payload size where that is larger); a burst's address goes
    out only when every buffer row its beats need is filled (so a write never waits for read data mid-burst, and a read
    error is known before a byte of the burst is written). Each burst gets an entry for the
    write-data generator (which rows, how to realign them) and one for the completion unit (wait for
    this response; the last one also retires the descriptor).

    Read errors: when the tracker's walk stops at a failed burst inside the rows the next burst needs,
    the descriptor fails with BUS_ERROR (bursts already sent stay written: the ABI allows a partial
    destination) and its queue stops. Failures of rows before the current job belong to jobs already
    dropped or failed and are simply acknowledged. A job whose queue has stopped is retired as dropped
    and its rows are freed without writing.
    """

    def __init__(self, *, num_queues: int, data_width: int, row_ptr_width: int, max_burst_beats: int,
                 write_burst_bytes: int = 0, rows_in_cycle: bool = False, skid: bool = False,
                 load_gap: bool = False):
        if write_burst_bytes and (write_burst_bytes & (write_burst_bytes - 1) or write_burst_bytes < data_width // 8
                                  or write_burst_bytes > min(PAGE_BYTES, max_burst_beats * data_width // 8)):
            raise ValueError(f"write_burst_bytes must be 0 or a power of two from a beat to max_burst_beats beats and "
                             f"4 KiB, not {write_burst_bytes}")
        self.data_width, self.row_ptr_width, self.max_burst_beats = data_width, row_ptr_width, max_burst_beats
        self.write_burst_bytes = write_burst_bytes
        # a burst may issue in the cycle `filled` first reaches its rows (the compare leads the decision: a cycle off
        # each copy's latency); without, from a registered compare, a cycle later (see `ready_rows`)
        self.rows_in_cycle = rows_in_cycle
        # a spare register before stage A, so that `wjob.ready` is a register (no spare full) rather than the end of
        # the burst decision (finish -> load -> B's and A's takes), which otherwise runs on into the job FIFO's read
        # side; no cycle is added: a job goes straight to A whenever A has room
        self.skid = skid
        # the next job becomes current only once the current one is gone (a cycle after its finish), so `load` and
        # with it the takes of stages B and A and the spare are functions of registers, not the end of the burst
        # decision (finish) that they otherwise are. It costs a cycle only between jobs back to back: a copy that
        # finds the planner empty is loaded as before
        self.load_gap = load_gap
        self.queue_bits = qb = index_bits(num_queues)
        rp = row_ptr_width
        super().__init__({
            "wjob": In(stream.Signature(job_layout(qb, rp))),
            "stops": In(stops_signature(num_queues)),
            "filled": In(rp), "row_alloc": In(rp),
            "fault": In(read_fault_signature(rp)),
            "aw": Out(write_address_stream()),
            "went": Out(stream.Signature(wentry_layout(data_width // 8, rp))),
            "cent": Out(stream.Signature(centry_layout(qb))),
            "stop": Out(event_signature(qb, index=True)),
            "idle": Out(1),
            # with write_burst_bytes: the host's Max_Payload_Size (PCIe code: 128 << code bytes; 0 where no link
            # sets one), which raises the span write bursts end at to it, up to the longest burst
            "max_payload": In(3),
        })

    def elaborate(self, platform):
        m = Module()
        rp = self.row_ptr_width
        dwb = self.data_width // 8
        job = job_layout(self.queue_bits, rp)
        lg = (dwb - 1).bit_length()
        lanes = lg or 1
        # Bursts end at each 4 KiB boundary of the destination and are at most `longest` beats from where the last
        # one ended: max_burst_beats; or with write_burst_bytes, that many bytes raised to the host's max payload size
        # (so each is one memory write), up to the longest burst that is a power of two. Cut from the copy's start,
        # not at multiples in the destination: 1 KiB 64 bytes into a 128-byte block is eight 128-byte writes, not
        # 64 + 7 x 128 + 64 (PCIe cuts writes anywhere but at 4 KiB; the write sender cuts from a burst's start too)
        if self.write_burst_bytes:
            top = 1 << (min(self.max_burst_beats, PAGE_BYTES // dwb).bit_length() - 1)
            spans = [min(max(self.write_burst_bytes, 128 << code), top * dwb) // dwb for code in range(8)]
            longest = Signal(range(top + 1))
            m.d.comb += longest.eq(Array(Const(v, range(top + 1)) for v in spans)[self.max_payload])
        else:
            longest = self.max_burst_beats
        pgw = bursts.page_bits(dwb)

        def wrap(pg):
            return pg[:pgw]

        def plan(pg, left, reach, addr):
            """The burst that starts at `addr`, `pg` beats before a span boundary, with `left` beats of the
            copy to go and the rows before `reach` needed so far; and the state after it."""
            c = bursts.cut(m, longest, pg, left)
            beats = c.beats
            return {"beats": beats, "last": c.last, "reach": (reach + beats)[:rp], "addr": addr,
                    "pg": wrap(pg - beats), "left": (left - beats)[:rp],
                    "dst": bursts.advance_by_cut(addr, c, pg, left, longest, dwb)}

        # Jobs pass two preparation stages, so that a burst is decided from registers only: A derives
        # the job's beats, page distance and row bounds; B plans its first burst. The current job keeps
        # the plan of its next burst (P) and the state after it (G), and plans the following one as it
        # issues. Rows are absolute: a burst is ready once `filled` reaches min(reach, end).
        plan_fields = {"beats": bursts.BEATS_BITS, "last": 1, "reach": rp, "addr": 64, "pg": pgw, "left": rp, "dst": 64}
        # `norows`: the job reads no rows (nrows == 0), from a register where a dropped job's finish needs it
        job_fields = {"end": rp, "b_neg": 1, "shift": lanes, "first_lane": lanes, "last_lane": lanes,
                      "preload": 1, "zero": 1, "norows": 1}

        def regs(prefix, fields):
            return {k: Signal(w, name=f"{prefix}_{k}") for k, w in fields.items()}

        # --- stage A -------------------------------------------------------------------
        nj = self.wjob.payload
        a_valid = Signal()
        a = Signal(job)
        aj = regs("a", job_fields)
        a_pg, a_left, a_reach, a_dst = Signal(pgw), Signal(rp), Signal(rp), Signal(64)
        # --- stage B -------------------------------------------------------------------
        b_valid = Signal()
        b = Signal(job)
        bj = regs("b", job_fields)
        bp = regs("b", plan_fields)
        # --- current job -----------------------------------------------------------------
        cur_valid = Signal()
        cur = Signal(job)
        cj = regs("c", job_fields)
        cp = regs("c", plan_fields)
        first = Signal()

        load = Signal()  # B becomes the current job
        b_take = Signal()  # A moves to B
        a_room = Signal()  # A may take a job this cycle
        a_in = Signal()  # it takes one: `nj`
        m.d.comb += [b_take.eq(~b_valid | load), a_room.eq(~a_valid | b_take)]
        s_valid = Signal()
        if self.skid:
            s = Signal(job)
            nj = Signal(job)
            m.d.comb += [self.wjob.ready.eq(~s_valid), nj.eq(Mux(s_valid, s, self.wjob.payload)),
                         a_in.eq(a_room & (s_valid | self.wjob.valid))]
            with m.If(a_room):
                m.d.sync += s_valid.eq(0)
            with m.Elif(self.wjob.valid & ~s_valid):  # A holds its job: the new one waits beside it
                m.d.sync += s_valid.eq(1)
            # the spare takes whatever is offered while it is empty (used only once s_valid says so): its many bits'
            # enable is then the one register, not the end of the burst decision that `a_room` is
            with m.If(~s_valid):
                m.d.sync += s.eq(self.wjob.payload)
        else:
            m.d.comb += [self.wjob.ready.eq(a_room), a_in.eq(self.wjob.valid & a_room)]
        with m.If(a_in):
            do_lane, so_lane = nj.dst_addr[:lg], nj.src_addr[:lg]
            b_neg, same = Signal(), Signal()
            m.d.comb += [b_neg.eq(so_lane < do_lane), same.eq(so_lane == do_lane)]
            m.d.sync += [
                a.eq(nj),
                aj["end"].eq(nj.row0 + nj.nrows),
                aj["b_neg"].eq(b_neg), aj["shift"].eq(so_lane - do_lane),
                aj["first_lane"].eq(do_lane), aj["last_lane"].eq(do_lane + nj.length - 1),
                aj["preload"].eq(~b_neg & ~same & (nj.nrows != 0)), aj["zero"].eq(nj.zero),
                aj["norows"].eq(nj.nrows == 0),
                # source lane < destination lane: beat j needs rows j-1 and j; same lane: row j alone; else j and j+1
                a_reach.eq(nj.row0 + ~(b_neg | same)),
                a_pg.eq(bursts.to_page(dwb, nj.dst_addr)),
                a_left.eq((do_lane + nj.length + (dwb - 1)) >> lg),
                a_dst.eq(nj.dst_addr & ~(dwb - 1)),
            ]
        with m.If(b_take):
            m.d.sync += a_valid.eq(0)
        with m.If(a_in):
            m.d.sync += a_valid.eq(1)

        first_plan = plan(a_pg, a_left, a_reach, a_dst)
        with m.If(b_take):
            m.d.sync += [b_valid.eq(a_valid), b.eq(a)]
            m.d.sync += [bj[k].eq(aj[k]) for k in job_fields]
            m.d.sync += [bp[k].eq(first_plan[k]) for k in plan_fields]

        # --- faults seen by the tracker, one cycle late; `ack` is the registered acknowledge -------
        ack = Signal()
        fq_valid = Signal()
        fq_row = Signal(rp)
        fault = Signal()
        m.d.sync += [fq_valid.eq(self.fault.valid & ~ack), fq_row.eq(self.fault.row)]
        m.d.comb += [fault.eq(fq_valid & ~ack), self.fault.ack.eq(ack)]

        def at_or_after(x, y):
            return ~(x - y)[rp - 1]

        # The fault's place against the current burst is compared a cycle ahead and holds while neither the
        # fault nor the burst changed (no issue, no load): waiting costs nothing, since `filled` stops at the
        # failed burst's first row, so no burst that needs that row can issue meanwhile.
        ready_rows, fault_here, fault_in, moved = Signal(), Signal(), Signal(), Signal()
        m.d.sync += fault_in.eq(fault & at_or_after(fq_row, cur.row0) & ~at_or_after(fq_row, cp["reach"])
                                & ~at_or_after(fq_row, cj["end"]))
        m.d.comb += fault_here.eq(fault & fault_in & ~moved)

        # --- AW register ----------------------------------------------------------------
        # Two places: the AW register and a spare behind it. A burst may issue while the spare is free, so the
        # decision does not wait on the write mux's `ready` (an address waits in the spare at most one cycle more)
        aw_free = Signal()
        sp_valid, sp_addr, sp_len = Signal(), Signal(64), Signal(8)
        m.d.comb += aw_free.eq(~sp_valid)
        with m.If(self.aw.ready):
            m.d.sync += [self.aw.valid.eq(sp_valid), self.aw.payload.addr.eq(sp_addr), self.aw.payload.len.eq(sp_len),
                         sp_valid.eq(0)]

        # --- what the current job does this cycle ------------------------------------------
        # A queue stop is seen a cycle late, except the planner's own (the next job may be of that queue). Both
        # candidates are registered, the current job's and B's, and `loaded` picks the one that is current now,
        # so `load` (which ends the burst decision) reaches a register of its own, not a mux in front of one.
        # A flush is seen a cycle late too, through the same registers (`dropped` counts it): a burst may then issue
        # in the flush's first cycle, as it could have in the cycle before. Nothing counts the drain as done while
        # the planner holds a job, and the completion unit meets that burst's response as any other in flight.
        stop_cq, stop_bq, loaded = Signal(), Signal(), Signal()
        stopped = Signal()
        m.d.comb += stopped.eq(Mux(loaded, stop_bq, stop_cq))
        we, ce = self.went.payload, self.cent.payload
        m.d.comb += [
            ce.queue.eq(cur.queue), ce.index.eq(cur.index), ce.cookie.eq(cur.cookie), ce.code.eq(cur.code),
            ce.notify.eq(cur.notify), ce.length.eq(cur.length),
            we.row0.eq(cur.row0), we.nrows.eq(cur.nrows), we.row_end.eq(cj["end"]), we.first.eq(first), we.last.eq(cp["last"]),
            we.preload.eq(cj["preload"]), we.shift.eq(cj["shift"]),
            we.first_lane.eq(cj["first_lane"]), we.last_lane.eq(cj["last_lane"]), we.imm.eq(cur.src_addr),
        ]
        next_plan = plan(cp["pg"], cp["left"], cp["reach"], cp["dst"])
        finish = Signal()
        fail_ack = Signal()
        issue = Signal()
        filled_end = at_or_after(self.filled, cj["end"])
        if self.rows_in_cycle:
            m.d.comb += ready_rows.eq(at_or_after(self.filled, cp["reach"]) | filled_end)
        else:
            # Registered: whether `filled` now reaches the rows of the burst that is next cycle's (B's first after a
            # load, the next one after an issue, else this one), all three compared at once. `filled` only grows, so
            # no burst is found ready early; rows counted this cycle are seen the next. The decision then starts from
            # a register, not from a compare of row pointers as wide as the longest copy, before its enable fans out
            # (on the ECP5 board that was the critical path). After an issue the next burst's rows are taken as the
            # longest burst's, against `filled` less that from registers (two cycles old: it only grows), so no
            # compare waits on the next burst's cut or on the tracker's count; a shorter burst (a copy's last is
            # covered by its end) that this finds not ready is found ready a cycle later, from its own reach.
            filled_r, filled_less = Signal(rp), Signal(rp)
            m.d.sync += [filled_r.eq(self.filled), filled_less.eq(filled_r - longest)]
            m.d.sync += ready_rows.eq(Mux(load,
                                          at_or_after(self.filled, bp["reach"]) | at_or_after(self.filled, bj["end"]),
                                          Mux(issue, at_or_after(filled_less, cp["reach"]),
                                              at_or_after(self.filled, cp["reach"])) | filled_end))
        # A burst's issue, flat: every term but `ready_rows` is ready early (and that one too, from its register,
        # without `rows_in_cycle`), so the decision is the rows' compare, or none, and one gate (it fans out to the
        # plan registers). The address goes to the AW register, or to the spare
        # while the AW register's address is still waiting.
        go_burst, issue_imm = Signal(), Signal()
        send = aw_free & self.went.ready & self.cent.ready
        m.d.comb += [
            go_burst.eq(cur_valid & (cur.kind == JobKind.COPY) & ~cj["zero"] & ~stopped & ~fault_here & send),
            issue_imm.eq(cur_valid & (cur.kind == JobKind.IMM) & ~stopped & send),
            issue.eq(issue_imm | (go_burst & ready_rows)),
        ]
        new_addr, new_len = Signal(64), Signal(8)
        m.d.comb += [new_addr.eq(Mux(cur.kind == JobKind.IMM, cur.dst_addr & ~(dwb - 1), cp["addr"])),
                     new_len.eq(Mux(cur.kind == JobKind.IMM, 0, cp["beats"] - 1))]
        with m.If(issue):
            with m.If(self.aw.valid & ~self.aw.ready):
                m.d.sync += [sp_valid.eq(1), sp_addr.eq(new_addr), sp_len.eq(new_len)]
            with m.Else():
                m.d.sync += [self.aw.valid.eq(1), self.aw.payload.addr.eq(new_addr), self.aw.payload.len.eq(new_len)]
        m.d.sync += self.stop.valid.eq(0)
        with m.If(cur_valid):
            with m.If(cur.kind == JobKind.ERROR):
                m.d.comb += [ce.marker.eq(1), self.cent.valid.eq(1), finish.eq(self.cent.ready)]
            with m.Elif((cur.kind == JobKind.DROP) | stopped):
                m.d.comb += [ce.marker.eq(1), ce.dropped.eq(1), we.kind.eq(WKind.DISCARD),
                             self.cent.valid.eq(self.went.ready | cj["norows"]),
                             self.went.valid.eq(self.cent.ready & ~cj["norows"]),
                             finish.eq(self.cent.ready & (self.went.ready | cj["norows"]))]
            with m.Elif(cur.kind == JobKind.IMM):
                m.d.comb += [ce.burst.eq(1), ce.marker.eq(1), we.kind.eq(WKind.IMM), we.beats.eq(1),
                             we.first_lane.eq(cur.dst_addr[:lg]),
                             self.cent.valid.eq(issue), self.went.valid.eq(issue), finish.eq(issue)]
            with m.Elif(cj["zero"]):
                m.d.comb += [ce.marker.eq(1), self.cent.valid.eq(1), finish.eq(self.cent.ready)]
            with m.Elif(fault_here):
                m.d.comb += [ce.marker.eq(1), ce.code.eq(ErrorCode.BUS_ERROR), we.kind.eq(WKind.DISCARD),
                             self.cent.valid.eq(self.went.ready), self.went.valid.eq(self.cent.ready),
                             finish.eq(self.cent.ready & self.went.ready)]
                m.d.comb += fail_ack.eq(finish)
                m.d.sync += [self.stop.valid.eq(finish), self.stop.queue.eq(cur.queue), self.stop.index.eq(cur.index)]
            with m.Else():
                m.d.comb += [ce.burst.eq(1), ce.marker.eq(cp["last"]), we.kind.eq(WKind.BURST), we.beats.eq(cp["beats"]),
                             self.cent.valid.eq(issue), self.went.valid.eq(issue), finish.eq(issue & cp["last"])]
                with m.If(issue):
                    m.d.sync += first.eq(0)
                    m.d.sync += [cp[k].eq(next_plan[k]) for k in plan_fields]

        # --- faults of rows before the current job: acknowledge --------------------------------
        ref = Signal(rp)
        m.d.comb += ref.eq(Mux(cur_valid, cur.row0, Mux(b_valid, b.row0, Mux(a_valid, a.row0,
                                                                            Mux(self.wjob.valid, nj.row0, self.row_alloc)))))
        m.d.sync += ack.eq(fail_ack | (fault & ~at_or_after(fq_row, ref)))

        # --- load the next job -----------------------------------------------------------------
        stop_cur, stop_b = Signal(), Signal()
        m.d.sync += moved.eq(issue | load)
        m.d.comb += [
            load.eq(b_valid & (~cur_valid if self.load_gap else ~cur_valid | finish)),
            stop_cur.eq(dropped(self.stops, cur.queue, cur.index, started=True)),
            stop_b.eq(dropped(self.stops, b.queue, b.index, started=True)),
        ]
        # the planner's own stop reaches the queue table a cycle later (registered), and its `stops` the
        # cycle after: until then the planner applies it itself
        def own(queue):
            return (fail_ack & (queue == cur.queue)) | (self.stop.valid & (queue == self.stop.queue))

        m.d.sync += [stop_bq.eq(stop_b | own(b.queue)), stop_cq.eq(stop_cur | own(cur.queue)), loaded.eq(load)]
        with m.If(finish):
            m.d.sync += cur_valid.eq(0)
        with m.If(load):
            m.d.sync += [cur_valid.eq(1), cur.eq(b), first.eq(1)]
            m.d.sync += [cj[k].eq(bj[k]) for k in job_fields]
            m.d.sync += [cp[k].eq(bp[k]) for k in plan_fields]
        m.d.comb += self.idle.eq(~cur_valid & ~a_valid & ~s_valid & ~b_valid & ~self.aw.valid & ~sp_valid)
        return m
