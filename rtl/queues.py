"""Queues: every queue's state (indices, errors, completion location) and the round-robin scheduler."""

from __future__ import annotations

from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from driver.abi import COMPLETION_ERROR_BIT, QUEUE, ErrorCode
from rtl.abi_layouts import bits_of
from rtl.records import (CODE_BITS, INDEX_BITS, DoneKind, completion_writer_port_signature, done_signature,
                         errlog_push_signature, event_signature, pick_layout, stops_signature, table_port_signature)
from rtl.params import index_bits
from rtl.round_robin import RoundRobin

CW_OUT_BITS = 5  # completion-word writes of one queue awaiting their response (the writer allows fewer)


class Queues(wiring.Component):
    """Holds each queue's registers and applies the events of every stage to them.

    Indices: `posted` (the doorbell), `dispatched` (next slot the scheduler reads) and `completed`
    (the completion count). Only the low 32 bits of posted and dispatched are kept: they never run
    more than SLOTS ahead of `completed`, which is 63 bits. `halting` stops a queue at once
    (scheduler, validator, read and write stages drop what follows the error); `halted` is set when
    the error reaches the completion stage, in order behind the descriptors before it.

    Enable takes effect once the queue has drained (an enable right after a disable waits); it
    loads START, clears the error and asks the completion writer to check the completion
    location and write the word. The scheduler serves a queue only after that check.
    """

    def __init__(self, *, num_queues: int, slots: int):
        self.num_queues, self.slots = num_queues, slots
        nq, queue_bits = num_queues, index_bits(num_queues)
        self.count_bits = (slots - 1).bit_length() + 3  # descriptors between scheduler and retirement
        super().__init__({
            "engine_enable": In(1),
            "flush": In(1),
            # host registers
            "regs": In(table_port_signature(queue_bits, 6, word=True)),
            # scheduler
            "pick": Out(stream.Signature(pick_layout(queue_bits))),
            # validator
            "squash": In(event_signature(queue_bits, index=True)),
            "issue": In(event_signature(queue_bits)),
            # an error was found at a producer index: the queue stops, descriptors after it are dropped
            "stop_v": In(event_signature(queue_bits, index=True)),  # by the validator
            "stop_p": In(event_signature(queue_bits, index=True)),  # by the write planner
            "stops": Out(stops_signature(nq)),
            # completion
            "done": In(done_signature(queue_bits)),
            # completion writer
            "cw": In(completion_writer_port_signature(nq)),
            # error log
            "log": Out(errlog_push_signature()),
            # state, one entry per queue
            "enabled": Out(nq), "halted": Out(nq), "busy": Out(nq), "inflight_zero": Out(nq),
        })

    def elaborate(self, platform):
        m = Module()
        nq, cb = self.num_queues, self.count_bits
        off = {r.name: r.offset for r in QUEUE.registers}
        enable_bit = bits_of(QUEUE, "CONTROL", "ENABLE").start

        rr = m.submodules.rr = RoundRobin(nq)
        elig = Signal(nq)
        chosen = Signal(range(nq))
        fired = Signal()
        m.d.comb += [rr.requests.eq(elig), chosen.eq(rr.grant), fired.eq(self.pick.valid & self.pick.ready),
                     rr.advance.eq(fired)]
        tokens = Signal(nq)  # per queue: its next pick is its doorbell error (all posted slots dispatched)

        done, dk = self.done.entry, self.done.entry.kind
        m.d.comb += self.stops.flush.eq(self.flush)
        halt_now = Signal()  # the completion stage halts a queue this cycle (it owns the log port)
        m.d.comb += [halt_now.eq(self.done.valid & (dk == DoneKind.HALT)), self.cw.fail.ready.eq(~halt_now)]

        rows = []
        for i in range(nq):
            q = _QueueRegs(i, cb)
            rows.append(q)
            w = self.regs.w_valid & (self.regs.w_index == i) & ~self.flush
            inflight = Signal(cb, name=f"q{i}_inflight")
            m.d.comb += inflight.eq(q.issued - q.retired)
            # in flight == 0, registered (the count of the next cycle from this one's, which moves by at most one
            # each way): the validator's FENCE wait reads it without the subtraction and its compare
            issue_i = Signal(name=f"q{i}_issue")
            done_i = Signal(name=f"q{i}_done")
            m.d.comb += [issue_i.eq(self.issue.valid & (self.issue.queue == i)),
                         done_i.eq(self.done.valid & (done.queue == i))]
            m.d.sync += q.none_out.eq(Mux(issue_i == done_i, inflight == 0, done_i & (inflight == 1)))
            idle_pipe = Signal(name=f"q{i}_idle_pipe")
            held = self.cw.hold.valid & (self.cw.hold.queue == i)  # its word between take and issue
            m.d.comb += idle_pipe.eq(q.none_out & ~q.disabling & (q.cw_out == 0) & ~held)

            # host register writes
            with m.If(w):
                with m.Switch(self.regs.w_offset):
                    with m.Case(off["CONTROL"]):
                        m.d.sync += q.ctl.eq(self.regs.w_data[enable_bit])
                        with m.If(self.regs.w_data[enable_bit]):
                            with m.If(~q.enabled):
                                m.d.sync += q.en_pending.eq(1)
                        with m.Else():
                            m.d.sync += q.en_pending.eq(0)
                            with m.If(q.enabled):
                                m.d.sync += [q.enabled.eq(0), q.disabling.eq(1), q.draining.eq(1), q.db_pend.eq(0)]
                    with m.Case(off["START_LO"]):
                        m.d.sync += q.start[:32].eq(self.regs.w_data)
                    with m.Case(off["START_HI"]):
                        m.d.sync += q.start[32:].eq(self.regs.w_data)
                    with m.Case(off["COMPL_REGION"]):
                        m.d.sync += q.compl_region.eq(self.regs.w_data[:16])
                    with m.Case(off["COMPL_OFFSET_LO"]):
                        m.d.sync += q.compl_offset[:32].eq(self.regs.w_data)
                    with m.Case(off["COMPL_OFFSET_HI"]):
                        m.d.sync += q.compl_offset[32:].eq(self.regs.w_data)

            # doorbell: an error is kept until the descriptors posted before it have run. Each check is the sign of
            # one subtraction from the written value. backwards: delta = value - posted, as a signed 32-bit count.
            # overflow: with delta not backwards, and posted - completed in [0, SLOTS] (a doorbell moves posted only
            # to within SLOTS of completed, which only follows it), value - completed > SLOTS exactly when
            # delta - room - 1 >= 0, room = SLOTS - (posted - completed); that is value - (completed + SLOTS + 1),
            # and `limit` keeps completed + SLOTS + 1 beside completed, so no compare follows the carry chain
            delta = Signal(32, name=f"q{i}_delta")
            over = Signal(32, name=f"q{i}_over")
            m.d.comb += [delta.eq(self.regs.w_data - q.posted), over.eq(self.regs.w_data - q.limit)]
            db_ok = Signal(name=f"q{i}_db_ok")  # the doorbell moves `posted`
            with m.If(w & (self.regs.w_offset == off["DOORBELL"]) & q.enabled & ~q.halting & ~q.db_pend):
                with m.If(delta[31]):
                    m.d.sync += [q.db_pend.eq(1), q.db_code.eq(ErrorCode.DOORBELL_BACKWARDS), q.db_value.eq(self.regs.w_data)]
                with m.Elif(~over[31]):
                    m.d.sync += [q.db_pend.eq(1), q.db_code.eq(ErrorCode.RING_OVERFLOW), q.db_value.eq(self.regs.w_data)]
                with m.Else():
                    m.d.comb += db_ok.eq(1)
                    m.d.sync += q.posted.eq(self.regs.w_data)

            # completion-word writer: `take` clears dirty; every event below that sets it wins
            with m.If(self.cw.take[i]):
                m.d.sync += q.dirty.eq(0)
            with m.If(self.cw.ok.valid & (self.cw.ok.queue == i)):
                m.d.sync += q.checking.eq(0)
            m.d.sync += q.cw_out.eq(q.cw_out + (self.cw.issue.valid & (self.cw.issue.queue == i))
                                    - (self.cw.ack.valid & (self.cw.ack.queue == i)))

            # enable, once drained
            enable_now = Signal(name=f"q{i}_enable_now")
            m.d.comb += enable_now.eq(q.en_pending & idle_pipe & ~self.flush)
            with m.If(enable_now):
                m.d.sync += [
                    q.en_pending.eq(0), q.enabled.eq(1), q.checking.eq(1), q.dirty.eq(0),
                    q.posted.eq(q.start[:32]), q.dispatched.eq(q.start[:32]), q.completed.eq(q.start[:63]),
                    q.limit.eq(q.start[:32] + self.slots + 1), q.next_done.eq(q.start[:32] + 1),
                    q.halting.eq(0), q.hard.eq(0), q.halted.eq(0), q.code.eq(0), q.cookie.eq(0), q.err_index.eq(0),
                    q.db_pend.eq(0), q.db_sent.eq(0), q.fence.eq(0), q.draining.eq(0),
                ]
            with m.If(q.disabling & q.none_out):
                m.d.sync += [q.disabling.eq(0), q.dirty.eq(1)]

            # `pending` is dispatched != posted of the next cycle, without a compare after the scheduler's grant or
            # the doorbell's checks: dispatched never passes posted, and posted only grows, so a doorbell that moves
            # it leaves work pending, a squash (back to a slot already posted) too, and a pick leaves work if the
            # slot after it was posted
            # this queue's pick was taken: its grant bit (which implies a request, so not `fired`, which waits on
            # every queue's request) and the validator's ready
            sel = Signal(name=f"q{i}_sel")
            m.d.comb += [sel.eq(rr.grant_onehot[i] & self.pick.ready), tokens[i].eq(~q.pending & q.db_pend)]
            picked = sel & ~tokens[i]
            rung = Signal(name=f"q{i}_rung")
            m.d.comb += rung.eq(db_ok & (self.regs.w_data != q.posted))
            # both outcomes from registers and the host's write first; the pick, the end of the scheduler's loop,
            # only chooses between them
            squashed = self.squash.valid & (self.squash.queue == i)
            if_picked, if_not = Signal(name=f"q{i}_pending_if_picked"), Signal(name=f"q{i}_pending_if_not")
            m.d.comb += [
                if_picked.eq(~enable_now & (squashed | ((q.dispatched + 1)[:32] != q.posted) | rung)),
                if_not.eq(~enable_now & (squashed | (q.dispatched != q.posted) | rung)),
            ]
            m.d.sync += q.pending.eq(Mux(picked, if_picked, if_not))
            # in flight == 0, a cycle late: used only while the queue waits on a FENCE, when nothing of the queue
            # issues and the count only falls, so it is never early
            m.d.sync += q.drained.eq(q.none_out)

            # scheduler and validator
            with m.If(sel):
                with m.If(tokens[i]):
                    m.d.sync += q.db_sent.eq(1)
                with m.Else():
                    m.d.sync += q.dispatched.eq(q.dispatched + 1)
            with m.If(q.fence & q.none_out):
                m.d.sync += q.fence.eq(0)
            with m.If(self.squash.valid & (self.squash.queue == i)):
                # a pick of this queue in the same cycle is dropped by the validator: forget its token too
                m.d.sync += [q.dispatched.eq(self.squash.index), q.fence.eq(1), q.db_sent.eq(0)]
            with m.If(issue_i):
                m.d.sync += q.issued.eq(q.issued + 1)
            # stops, oldest source last so that it wins: validator, write planner, completion
            for valid, queue, index in ((self.stop_v.valid, self.stop_v.queue, self.stop_v.index),
                                        (self.stop_p.valid, self.stop_p.queue, self.stop_p.index),
                                        (halt_now, done.queue, done.index)):
                earlier = (index - q.stop_at)[:INDEX_BITS].as_signed() < 0
                with m.If(valid & (queue == i) & (~q.halting | earlier)):
                    m.d.sync += [q.halting.eq(1), q.stop_at.eq(index)]
                if valid is not self.stop_v.valid:
                    with m.If(valid & (queue == i)):
                        m.d.sync += q.hard.eq(1)

            # completion
            with m.If(done_i):
                m.d.sync += q.retired.eq(q.retired + 1)
                with m.If((dk == DoneKind.SUCCESS) & ~q.halted):
                    m.d.sync += [q.completed.eq(q.completed + 1), q.limit.eq(q.limit + 1),
                                 q.next_done.eq(q.next_done + 1)]
                    with m.If(done.notify | ((q.next_done == q.posted) & ~q.db_pend)):  # the last posted one
                        m.d.sync += q.dirty.eq(1)
                with m.If((dk == DoneKind.HALT) & ~q.halted):
                    m.d.sync += [q.halted.eq(1), q.code.eq(done.code), q.cookie.eq(done.cookie),
                                 q.err_index.eq(done.index), q.dirty.eq(1)]
            with m.If(self.cw.fail.valid & self.cw.fail.ready & (self.cw.fail.queue == i)):
                m.d.sync += [q.halted.eq(1), q.halting.eq(1), q.hard.eq(1), q.checking.eq(0), q.code.eq(self.cw.fail.code),
                             q.cookie.eq(0), q.err_index.eq(q.start[:32])]

            has_work = Signal(name=f"q{i}_has_work")
            m.d.comb += has_work.eq(q.enabled & ~q.halting & ((q.completed[:32] != q.posted) | q.db_pend))
            m.d.comb += [
                # eligibility from registers only (`pending`, `drained`), so the scheduler's loop is short
                elig[i].eq(self.engine_enable & ~self.flush & q.enabled & ~q.halting & ~q.checking
                           & (q.pending | (q.db_pend & ~q.db_sent)) & (~q.fence | q.drained)),
                self.enabled[i].eq(q.enabled), self.stops.halting[i].eq(q.halting), self.halted[i].eq(q.halted),
                self.stops.stop_at[i].eq(q.stop_at), self.stops.draining[i].eq(q.draining),
                self.stops.hard[i].eq(q.hard),
                self.cw.dirty[i].eq(q.dirty), self.cw.checking[i].eq(q.checking), self.inflight_zero[i].eq(q.none_out),
                self.busy[i].eq(q.en_pending | q.checking | q.dirty | ~idle_pipe | has_work),
                self.cw.word[i].eq(Cat(q.completed, q.halted)),
                self.cw.compl_region[i].eq(q.compl_region), self.cw.compl_offset[i].eq(q.compl_offset),
            ]

        # error log: halts from the completion stage, else a failed completion-location check
        with m.If(halt_now):
            m.d.comb += [self.log.valid.eq(_pick(rows, done.queue, lambda q: ~q.halted)),
                         self.log.entry.code.eq(done.code), self.log.entry.queue.eq(done.queue),
                         self.log.entry.cookie.eq(done.cookie), self.log.entry.index.eq(done.index)]
        with m.Elif(self.cw.fail.valid):
            m.d.comb += [self.log.valid.eq(1), self.log.entry.code.eq(self.cw.fail.code),
                         self.log.entry.queue.eq(self.cw.fail.queue), self.log.entry.cookie.eq(0),
                         self.log.entry.index.eq(_pick(rows, self.cw.fail.queue, lambda q: q.start[:32]))]

        # The pick's fields are selected by the round robin's one-hot grant (an AND-OR), not by its index (encoded from
        # the one-hot bits first), and each queue's slot (its doorbell error's or its next descriptor's) is chosen from
        # its registers beside the grant, not after it: the scheduler's eligibility -> grant -> the validator's S0 was
        # the board's worst path once the write entries' enable was off it
        slots = [Signal(32, name=f"q{i}_next_slot") for i in range(nq)]
        m.d.comb += [slots[i].eq(Mux(tokens[i], q.db_value, q.dispatched)) for i, q in enumerate(rows)]
        m.d.comb += [
            self.pick.valid.eq(rr.valid),
            self.pick.payload.queue.eq(chosen),
            self.pick.payload.token.eq((tokens & rr.grant_onehot).any()),
            self.pick.payload.index.eq(_select(rr.grant_onehot, slots)),
            self.pick.payload.code.eq(_select(rr.grant_onehot, [q.db_code for q in rows])),
        ]

        # host reads (combinational on hr_queue/hr_offset)
        status = {name: bits_of(QUEUE, "STATUS", name) for name in ("ENABLED", "BUSY", "HALTED", "CODE")}
        with m.Switch(self.regs.r_offset):
            with m.Case(off["CONTROL"]):
                m.d.comb += self.regs.r_data[enable_bit].eq(_pick(rows, self.regs.r_index, lambda q: q.ctl))
            with m.Case(off["STATUS"]):
                m.d.comb += [
                    self.regs.r_data[status["ENABLED"]].eq(self.enabled.bit_select(self.regs.r_index, 1)),
                    self.regs.r_data[status["BUSY"]].eq(self.busy.bit_select(self.regs.r_index, 1)),
                    self.regs.r_data[status["HALTED"]].eq(self.halted.bit_select(self.regs.r_index, 1)),
                    self.regs.r_data[status["CODE"]].eq(_pick(rows, self.regs.r_index, lambda q: q.code)),
                ]
            with m.Case(off["DOORBELL"]):
                m.d.comb += self.regs.r_data.eq(_pick(rows, self.regs.r_index, lambda q: q.posted))
            with m.Case(off["START_LO"]):
                m.d.comb += self.regs.r_data.eq(_pick(rows, self.regs.r_index, lambda q: q.start[:32]))
            with m.Case(off["START_HI"]):
                m.d.comb += self.regs.r_data.eq(_pick(rows, self.regs.r_index, lambda q: q.start[32:]))
            with m.Case(off["COMPLETED_LO"]):
                m.d.comb += self.regs.r_data.eq(self.regs.r_word[:32])
            with m.Case(off["COMPLETED_HI"]):
                m.d.comb += self.regs.r_data.eq(self.regs.r_word[32:])
            with m.Case(off["COMPL_REGION"]):
                m.d.comb += self.regs.r_data.eq(_pick(rows, self.regs.r_index, lambda q: q.compl_region))
            with m.Case(off["COMPL_OFFSET_LO"]):
                m.d.comb += self.regs.r_data.eq(_pick(rows, self.regs.r_index, lambda q: q.compl_offset[:32]))
            with m.Case(off["COMPL_OFFSET_HI"]):
                m.d.comb += self.regs.r_data.eq(_pick(rows, self.regs.r_index, lambda q: q.compl_offset[32:]))
            with m.Case(off["ERROR_COOKIE"]):
                m.d.comb += self.regs.r_data.eq(_pick(rows, self.regs.r_index, lambda q: q.cookie))
            with m.Case(off["ERROR_INDEX"]):
                m.d.comb += self.regs.r_data.eq(_pick(rows, self.regs.r_index, lambda q: q.err_index))
        m.d.comb += self.regs.r_word.eq(self.cw.word[self.regs.r_index])
        assert COMPLETION_ERROR_BIT == 63, "the completion word is Cat(completed[0:63], halted)"
        return m


class _QueueRegs:
    """The registers of one queue."""

    def __init__(self, i: int, count_bits: int):
        def reg(shape, name, **kw):
            return Signal(shape, name=f"q{i}_{name}", **kw)

        self.ctl = reg(1, "ctl")  # CONTROL.ENABLE as written
        self.enabled = reg(1, "enabled")
        self.en_pending = reg(1, "en_pending")
        self.disabling = reg(1, "disabling")  # disabled, descriptors still in flight
        self.draining = reg(1, "draining")  # disabled: what has not started reading is dropped
        self.checking = reg(1, "checking")  # the completion location is being checked after enable
        self.halting = reg(1, "halting")  # an error was found: descriptors after stop_at are dropped
        self.stop_at = reg(INDEX_BITS, "stop_at")
        self.hard = reg(1, "hard")  # halting, stopped by the write planner or the completion stage
        self.halted = reg(1, "halted")
        self.code = reg(CODE_BITS, "code")
        self.cookie = reg(32, "cookie")
        self.err_index = reg(INDEX_BITS, "err_index")
        self.start = reg(64, "start")
        self.compl_region = reg(16, "compl_region")
        self.compl_offset = reg(64, "compl_offset")
        self.posted = reg(32, "posted")
        self.dispatched = reg(32, "dispatched")
        self.pending = reg(1, "pending")  # dispatched != posted, kept exactly (a token is picked when it is clear)
        self.drained = reg(1, "drained")  # nothing in flight, a cycle ago
        self.completed = reg(63, "completed")
        self.limit = reg(32, "limit")  # completed[:32] + SLOTS + 1: the first doorbell value that overflows the ring
        self.next_done = reg(32, "next_done")  # completed[:32] + 1, so the last slot's completion is found by a compare
        self.db_pend = reg(1, "db_pend")
        self.db_code = reg(CODE_BITS, "db_code")
        self.db_value = reg(32, "db_value")
        self.db_sent = reg(1, "db_sent")  # the doorbell error went down the pipeline; it halts the queue there
        self.fence = reg(1, "fence")  # a FENCE/IMM descriptor waits for everything before it
        self.issued = reg(count_bits, "issued")
        self.retired = reg(count_bits, "retired")
        self.none_out = reg(1, "none_out", init=1)  # issued == retired: nothing in flight
        self.dirty = reg(1, "dirty")  # the completion word should be written
        self.cw_out = reg(CW_OUT_BITS, "cw_out")


def _select(onehot, values):
    """The value whose bit is set in `onehot` (at most one is): each bit an OR of the values' bits under theirs."""
    return Cat(*(Cat(onehot[i] & v[b] for i, v in enumerate(values)).any() for b in range(len(values[0]))))


def _pick(rows: list[_QueueRegs], index, field):
    """field(row) of the row chosen by a signal index."""
    return Array(field(q) for q in rows)[index]
