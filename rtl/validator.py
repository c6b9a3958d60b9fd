"""Validator: reads each picked slot from its window and checks it against the region table, before any byte moves."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from driver.abi import FLAGS_VALID, IMM_BYTES, ErrorCode, Flag, Perm
from rtl import bursts
from rtl.abi_layouts import DescriptorLayout
from rtl.records import (CODE_BITS, JobKind, dropped, event_signature, job_layout, pick_layout, stops_signature,
                         window_read_signature)
from rtl.params import index_bits
from rtl.region_table import lookup_signature


class Validator(wiring.Component):
    """Four stages, one descriptor a cycle, stalling together when the job queue is full:

    S0  the scheduler's pick is registered.
    S1  the slot arrives from the window; a FENCE or IMM descriptor whose queue still has work in
        flight is squashed and its queue rewinds to it (it is read again once the queue drained; a
        pick of that queue in S0 or in the same cycle is dropped); the source and destination regions are
        looked up.
    S2  regions arrive; flag, length, region, permission and (IMM bus address) alignment checks; bounds and overlap
        are compared (offset + length > size without wrapping, one carry chain each); bus addresses
        and the source's buffer rows are summed.
    S3  the first failing check in ErrorCode order wins; the first read burst is planned. A failure (or a
        doorbell-error token) becomes an ERROR job; a failure stops its queue from that index on
        (a token needs not: nothing follows it), the stop reaching the queue table a cycle later. A descriptor
        after the index where its queue stopped becomes a DROP job.
    """

    def __init__(self, *, num_queues: int, slots: int, data_width: int, row_ptr_width: int, max_burst_beats: int):
        self.slots, self.data_width = slots, data_width
        self.row_ptr_width, self.max_burst_beats = row_ptr_width, max_burst_beats
        self.queue_bits = qb = index_bits(num_queues)
        super().__init__({
            "pick": In(stream.Signature(pick_layout(qb))),
            "win": Out(window_read_signature(num_queues, slots)),
            "src": Out(lookup_signature()),
            "dst": Out(lookup_signature()),
            "stops": In(stops_signature(num_queues)),
            "inflight_zero": In(num_queues),
            "squash": Out(event_signature(qb, index=True)),
            "issue": Out(event_signature(qb)),
            "stop": Out(event_signature(qb, index=True)),
            "job": Out(stream.Signature(job_layout(qb, row_ptr_width))),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        pick = pick_layout(self.queue_bits)
        db = self.data_width // 8
        adv = Signal()

        # S0: the scheduler's pick, registered (the window read starts from a register)
        s0_valid, s1_valid = Signal(), Signal()
        s0, s1 = Signal(pick), Signal(pick)
        fence_wait = Signal()
        squash = Signal()

        def killed(queue):
            # a pick of the queue squashed this cycle is dropped (the queue rewinds to the squashed slot)
            return squash & (queue == s1.queue)

        m.d.comb += self.pick.ready.eq(~s0_valid | adv)
        with m.If(adv):
            m.d.sync += s0_valid.eq(0)
        with m.If(self.pick.ready):
            m.d.sync += [s0_valid.eq(self.pick.valid & ~killed(self.pick.payload.queue)), s0.eq(self.pick.payload)]

        # S1: slot read in flight
        m.d.comb += [
            self.win.en.eq(adv), self.win.queue.eq(s0.queue),
            self.win.slot.eq(s0.index[: (self.slots - 1).bit_length()]),
        ]
        with m.If(adv):
            m.d.sync += [s1_valid.eq(s0_valid & ~killed(s0.queue)), s1.eq(s0)]

        desc = self.win.desc
        m.d.comb += fence_wait.eq(s1_valid & ~s1.token & self.win.drain & ~self.inflight_zero.bit_select(s1.queue, 1))
        m.d.comb += [
            squash.eq(adv & fence_wait),
            self.squash.valid.eq(squash), self.squash.queue.eq(s1.queue), self.squash.index.eq(s1.index),
            self.issue.valid.eq(adv & s1_valid & ~fence_wait), self.issue.queue.eq(s1.queue),
            self.src.en.eq(adv), self.src.id.eq(desc.src_region),
            self.dst.en.eq(adv), self.dst.id.eq(desc.dst_region),
        ]

        # S2: regions in flight
        s2_valid = Signal()
        s2 = Signal(pick)
        s2d = Signal(DescriptorLayout)
        with m.If(adv):
            m.d.sync += [s2_valid.eq(s1_valid & ~fence_wait), s2.eq(s1), s2d.eq(desc)]

        se, de = self.src.entry, self.dst.entry
        imm = Signal()
        early = Signal(CODE_BITS)
        m.d.comb += imm.eq((s2d.flags & Flag.IMM) != 0)
        with m.If(((s2d.flags & ~FLAGS_VALID) != 0) | (s2d.reserved != 0)):
            m.d.comb += early.eq(ErrorCode.INVALID_DESCRIPTOR)
        with m.Elif(imm & (s2d.length != IMM_BYTES)):
            m.d.comb += early.eq(ErrorCode.BAD_LENGTH)
        with m.Elif((~imm & (se.perms == 0)) | (de.perms == 0)):
            m.d.comb += early.eq(ErrorCode.UNKNOWN_REGION)
        with m.Elif((~imm & ~se.perms[(Perm.READ).bit_length() - 1]) | ~de.perms[(Perm.WRITE).bit_length() - 1]):
            m.d.comb += early.eq(ErrorCode.PERMISSION)
        with m.Elif(imm & ((de.addr[:3] + s2d.dst_offset[:3])[:3] != 0)):
            # the bus address: an IMM is one aligned 8-byte write (a region base off 8 bytes would split it)
            m.d.comb += early.eq(ErrorCode.MISALIGNED)

        # S3: bounds and overlap
        s3_valid = Signal()
        s3 = Signal(pick)
        s3_imm, s3_same, s3_notify = Signal(), Signal(), Signal()
        s3_early = Signal(CODE_BITS)
        s3_cookie, s3_len = Signal(32), Signal(32)
        s3_src_oob, s3_dst_oob, s3_overlap, s3_zero = Signal(), Signal(), Signal(), Signal()
        s3_src_addr, s3_dst_addr = Signal(64), Signal(64)
        s3_nrows = Signal(self.row_ptr_width)
        lg = (db - 1).bit_length()
        with m.If(adv):
            m.d.sync += [
                s3_valid.eq(s2_valid), s3.eq(s2), s3_imm.eq(imm), s3_early.eq(early),
                s3_same.eq(~imm & (s2d.src_region == s2d.dst_region) & (s2d.length != 0)),
                s3_notify.eq((s2d.flags & Flag.NOTIFY) != 0), s3_cookie.eq(s2d.cookie), s3_len.eq(s2d.length),
                s3_zero.eq(s2d.length == 0),
                # offset + length > size, and the two ranges' overlap, each in one carry chain
                s3_src_oob.eq(_sum_exceeds(s2d.src_offset, s2d.length, se.size)),
                s3_dst_oob.eq(_sum_exceeds(s2d.dst_offset, s2d.length, de.size)),
                s3_overlap.eq(_sum_exceeds(s2d.dst_offset, s2d.length, s2d.src_offset)
                              & _sum_exceeds(s2d.src_offset, s2d.length, s2d.dst_offset)),
                s3_src_addr.eq(Mux(imm, s2d.src_offset, se.addr + s2d.src_offset)),
                s3_dst_addr.eq(de.addr + s2d.dst_offset),
                s3_nrows.eq(((se.addr[:lg] + s2d.src_offset[:lg])[:lg] + s2d.length + (db - 1)) >> lg),
            ]
        code = Signal(CODE_BITS)
        with m.If(s3_early != 0):
            m.d.comb += code.eq(s3_early)
        with m.Elif((~s3_imm & s3_src_oob) | s3_dst_oob):
            m.d.comb += code.eq(ErrorCode.OUT_OF_BOUNDS)
        with m.Elif(s3_same & s3_overlap):
            m.d.comb += code.eq(ErrorCode.OVERLAP)

        j = self.job.payload
        first_read = bursts.cut(m, self.max_burst_beats, bursts.to_page(db, s3_src_addr), s3_nrows)
        rbeats, rlast = first_read.beats, first_read.last
        kind = Signal(JobKind)
        # A failure's stop reaches the queue table from a register, a cycle after its job: in that cycle a
        # descriptor of the same queue behind it (a later index) is dropped here, as the table's stop would
        stop_q, stop_v = Signal(self.queue_bits), Signal()
        with m.If(s3.token):
            m.d.comb += kind.eq(JobKind.ERROR)
        with m.Elif(dropped(self.stops, s3.queue, s3.index, started=False) | (stop_v & (stop_q == s3.queue))):
            m.d.comb += kind.eq(JobKind.DROP)
        with m.Elif(code != 0):
            m.d.comb += kind.eq(JobKind.ERROR)
        with m.Elif(s3_imm):
            m.d.comb += kind.eq(JobKind.IMM)
        with m.Else():
            m.d.comb += kind.eq(JobKind.COPY)
        m.d.comb += [
            self.job.valid.eq(s3_valid),
            j.kind.eq(kind), j.queue.eq(s3.queue), j.index.eq(s3.index),
            j.cookie.eq(Mux(s3.token, 0, s3_cookie)), j.code.eq(Mux(s3.token, s3.code, code)),
            j.notify.eq(s3_notify), j.src_addr.eq(s3_src_addr), j.dst_addr.eq(s3_dst_addr),
            j.length.eq(s3_len), j.zero.eq(s3_zero), j.nrows.eq(s3_nrows), j.rbeats.eq(rbeats), j.rlast.eq(rlast),
            adv.eq(~s3_valid | self.job.ready),
        ]
        m.d.sync += [stop_v.eq(adv & s3_valid & (kind == JobKind.ERROR) & ~s3.token),
                     stop_q.eq(s3.queue), self.stop.index.eq(s3.index)]
        m.d.comb += [self.stop.valid.eq(stop_v), self.stop.queue.eq(stop_q)]
        m.d.comb += self.idle.eq(~s0_valid & ~s1_valid & ~s2_valid & ~s3_valid & ~stop_v)
        return m


def _sum_exceeds(a, b, c) -> Value:
    """a + b > c for unsigned a, b, c: a + b + ~c (= a + b - c - 1) is not negative. The three terms are
    first reduced to two (a carry-save step), so one carry chain remains."""
    w = max(len(a), len(b), len(c)) + 3
    a, b, nc = (Cat(v, Const(0, w - len(v))) for v in (a, b, c))
    nc = ~nc
    s = a ^ b ^ nc
    carry = (a & b) | (a & nc) | (b & nc)
    return ~(s + Cat(Const(0, 1), carry[: w - 1]))[w - 1]
