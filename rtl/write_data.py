"""WriteData: produces the W beats of every write burst, reading buffer rows and realigning them to the destination."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from rtl.records import WKind, wentry_layout, write_data_stream
from rtl.realign import Realigner


class WriteData(wiring.Component):
    """One beat a cycle. Entries arrive in burst order from the write planner, which issued them only
    once their rows were filled. A descriptor's beats consume its rows in order: beat j combines the
    two rows that hold its destination lanes (`preload` reads one row ahead first when the source
    starts in a later lane than the destination; in the same lane, beat j is row j). Rows are freed
    as they are read; a DISCARD entry
    frees the rest of a failed or dropped descriptor as its reads land, and is done once all have.

    Pipeline: token (row read issued) -> A (row arrives) -> W register. A stalled W channel holds
    all three.
    """

    def __init__(self, *, data_width: int, buffer_rows: int, row_ptr_width: int):
        self.data_width, self.row_ptr_width = data_width, row_ptr_width
        self.buf_addr_width = (buffer_rows - 1).bit_length()
        rp = row_ptr_width
        self.lanes = (data_width // 8 - 1).bit_length() or 1
        super().__init__({
            "went": In(stream.Signature(wentry_layout(data_width // 8, rp))),
            "buf": In(memory.ReadPort.Signature(addr_width=self.buf_addr_width, shape=data_width)),
            "filled": In(rp),
            "row_free": Out(rp),
            "w": Out(write_data_stream(data_width)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        rp, lanes, dw = self.row_ptr_width, self.lanes, self.data_width
        e = self.went.payload
        adv = Signal()
        m.d.comb += adv.eq(~self.w.valid | self.w.ready)

        started = Signal()  # the current descriptor has had its first token
        consumed = Signal(rp)  # its rows read so far
        beat = Signal(9)  # beat within the current burst
        # From registers, so that the entry's take and the rows' counters do not wait on compares of the entry
        # with the counters: `left` is nrows - consumed while `started` (the entries between a descriptor's first
        # token and its end carry the same nrows, and consumed never passes it), `left_nz` is left != 0 (so
        # consumed < nrows); `beat_zero` is beat == 0, `beat_last` is beat == beats - 1 while beat != 0 (the entry
        # is held until its last beat)
        left, left_nz = Signal(rp), Signal()
        beat_zero, beat_last = Signal(init=1), Signal()
        row_free = Signal(rp)
        # row_free + 1, kept beside it: a beat's take moves row_free by a choice between two registers, so the
        # take (the latest signal here) meets no carry chain on its way to the read engine's counter
        row_free1 = Signal(rp, init=1)
        m.d.comb += self.row_free.eq(row_free)

        # --- token: what the next cycle's A stage holds ------------------------------------
        t_valid, t_emit, t_consume, t_last, t_first_beat, t_last_beat, t_imm = (Signal(name=f"t_{n}") for n in (
            "valid", "emit", "consume", "last", "first_beat", "last_beat", "imm"))
        done_rows = Signal(rp)
        m.d.comb += done_rows.eq(Mux(started, consumed, 0))
        row = Signal(rp)
        m.d.comb += row.eq(e.row0 + done_rows)
        discard_ready = Signal()
        landed = Signal(rp)
        m.d.comb += [landed.eq(self.filled - e.row_end), discard_ready.eq(~landed[-1])]

        with m.If(self.went.valid):
            with m.Switch(e.kind):
                with m.Case(WKind.BURST):
                    with m.If(e.first & ~started & e.preload):
                        m.d.comb += [t_valid.eq(1), t_consume.eq(1)]
                        with m.If(adv):
                            m.d.sync += [started.eq(1), consumed.eq(1), row_free.eq(row_free1),
                                         row_free1.eq(row_free1 + 1), left.eq(e.nrows - 1), left_nz.eq(e.nrows != 1)]
                    with m.Else():
                        left_now = Signal(rp)  # nrows - done_rows
                        m.d.comb += [
                            left_now.eq(Mux(started, left, e.nrows)),
                            # done_rows < nrows; beat == beats - 1
                            t_valid.eq(1), t_emit.eq(1), t_consume.eq(Mux(started, left_nz, e.nrows != 0)),
                            t_last.eq(Mux(beat_zero, e.beats == 1, beat_last)),
                            t_first_beat.eq(e.first & beat_zero),
                            t_last_beat.eq(e.last & t_last),
                        ]
                        with m.If(adv):
                            m.d.sync += [started.eq(1), consumed.eq(done_rows + t_consume),
                                         row_free.eq(Mux(t_consume, row_free1, row_free)),
                                         row_free1.eq(Mux(t_consume, row_free1 + 1, row_free1)), beat.eq(beat + 1),
                                         left.eq(left_now - t_consume),
                                         left_nz.eq(Mux(t_consume, left_now != 1, left_now != 0)),
                                         beat_zero.eq(0), beat_last.eq((beat + 2)[:10] == e.beats)]
                            with m.If(t_last):
                                m.d.sync += [beat.eq(0), beat_zero.eq(1)]
                                m.d.comb += self.went.ready.eq(1)
                                with m.If(e.last):
                                    m.d.sync += started.eq(0)
                with m.Case(WKind.IMM):
                    m.d.comb += [t_valid.eq(1), t_emit.eq(1), t_last.eq(1), t_imm.eq(1),
                                 self.went.ready.eq(adv)]
                with m.Case(WKind.DISCARD):
                    m.d.comb += self.went.ready.eq(discard_ready)
                    with m.If(discard_ready):
                        m.d.sync += [row_free.eq(e.row_end), row_free1.eq(e.row_end + 1), started.eq(0)]
                    with m.Else():
                        # Free the rows as they land: a descriptor larger than the buffer reads its rest
                        # only into freed rows, so holding them all until the end deadlocked (a reset or a
                        # drop with such a copy in flight never finished).
                        m.d.sync += [row_free.eq(self.filled), row_free1.eq(self.filled + 1)]
        m.d.comb += [self.buf.en.eq(adv), self.buf.addr.eq(row[: self.buf_addr_width])]

        # --- A: the row is on rd_data ---------------------------------------------------
        a_valid, a_emit, a_consume, a_last, a_first_beat, a_last_beat, a_imm = (Signal(name=f"a_{n}") for n in (
            "valid", "emit", "consume", "last", "first_beat", "last_beat", "imm"))
        a_shift, a_first_lane, a_last_lane = Signal(lanes), Signal(lanes), Signal(lanes)
        a_value = Signal(64)
        with m.If(adv):
            m.d.sync += [
                a_valid.eq(t_valid & adv), a_emit.eq(t_emit), a_consume.eq(t_consume), a_last.eq(t_last),
                a_first_beat.eq(t_first_beat), a_last_beat.eq(t_last_beat), a_imm.eq(t_imm),
                a_shift.eq(e.shift), a_first_lane.eq(e.first_lane), a_last_lane.eq(e.last_lane), a_value.eq(e.imm),
            ]

        prev = Signal(dw)
        ra = m.submodules.realign = Realigner(dw)
        m.d.comb += [
            # same lanes: beat j is row j as read (no preload, so no bubble between descriptors)
            ra.prev.eq(Mux(a_shift == 0, self.buf.data, prev)), ra.cur.eq(self.buf.data), ra.shift.eq(a_shift),
            ra.first.eq(a_first_beat), ra.first_lane.eq(a_first_lane),
            ra.last.eq(a_last_beat), ra.last_lane.eq(a_last_lane),
        ]
        imm_data = Signal(dw)
        m.d.comb += imm_data.eq(a_value << Cat(Const(0, 3), a_first_lane))
        with m.If(adv):
            m.d.sync += self.w.valid.eq(a_valid & a_emit)
            with m.If(a_valid & a_consume):
                m.d.sync += prev.eq(self.buf.data)
            with m.If(a_valid & a_emit):
                m.d.sync += [
                    self.w.payload.data.eq(Mux(a_imm, imm_data, ra.out)),
                    self.w.payload.strb.eq(Mux(a_imm, Const(0xFF, dw // 8) << a_first_lane, ra.strb)),
                    self.w.payload.last.eq(a_last),
                ]
        m.d.comb += self.idle.eq(~self.went.valid & ~a_valid & ~self.w.valid)
        return m
