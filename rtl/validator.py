"""Validator: reads each picked slot from its window and checks it against the region table, before any byte moves."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from driver.abi import FLAGS_VALID, IMM_BYTES, ErrorCode, Flag, Perm
from rtl.abi_layouts import DescriptorLayout
from rtl.jobs import CODE_BITS, INDEX_BITS, JobKind, dropped, job_layout, pick_layout, stops_signature
from rtl.params import EngineParams
from rtl.region_table import lookup_signature


class Validator(wiring.Component):
    """Three stages, one descriptor a cycle, stalling together when the job queue is full:

    S1  the slot arrives from the window; a FENCE or IMM descriptor whose queue still has work in
        flight is squashed and its queue rewinds to it (it is read again once the queue drained);
        the source and destination regions are looked up.
    S2  regions arrive; flag, length, alignment, region and permission checks; end offsets and
        bus addresses are summed (65-bit ends, so offsets near 2**64 cannot wrap).
    S3  bounds and overlap; the first failing check in ErrorCode order wins. A failure (or a
        doorbell-error token) becomes an ERROR job; a failure stops its queue from that index on
        (a token needs not: nothing follows it). A descriptor after the index where its queue
        stopped becomes a DROP job.
    """

    def __init__(self, p: EngineParams):
        self.p = p
        super().__init__({
            "pick": In(stream.Signature(pick_layout(p))),
            "win_en": Out(1), "win_queue": Out(p.queue_bits), "win_slot": Out(range(p.slots)),
            "win_desc": In(DescriptorLayout),
            "src": Out(lookup_signature()),
            "dst": Out(lookup_signature()),
            "stops": In(stops_signature(p)),
            "inflight_zero": In(p.num_queues),
            "squash_valid": Out(1), "squash_queue": Out(p.queue_bits), "squash_index": Out(INDEX_BITS),
            "issue_valid": Out(1), "issue_queue": Out(p.queue_bits),
            "stop_valid": Out(1), "stop_queue": Out(p.queue_bits), "stop_index": Out(INDEX_BITS),
            "job": Out(stream.Signature(job_layout(p))),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        adv = Signal()

        # S1: slot read in flight
        s1_valid = Signal()
        s1 = Signal(pick_layout(p))
        m.d.comb += [
            self.pick.ready.eq(adv),
            self.win_en.eq(adv), self.win_queue.eq(self.pick.payload.queue),
            self.win_slot.eq(self.pick.payload.index[: (p.slots - 1).bit_length()]),
        ]
        with m.If(adv):
            m.d.sync += [s1_valid.eq(self.pick.valid), s1.eq(self.pick.payload)]

        desc = self.win_desc
        fence_wait = Signal()
        m.d.comb += fence_wait.eq(s1_valid & ~s1.token & ((desc.flags & (Flag.FENCE | Flag.IMM)) != 0)
                                  & ~self.inflight_zero.bit_select(s1.queue, 1))
        m.d.comb += [
            self.squash_valid.eq(adv & fence_wait), self.squash_queue.eq(s1.queue), self.squash_index.eq(s1.index),
            self.issue_valid.eq(adv & s1_valid & ~fence_wait), self.issue_queue.eq(s1.queue),
            self.src.en.eq(adv), self.src.id.eq(desc.src_region),
            self.dst.en.eq(adv), self.dst.id.eq(desc.dst_region),
        ]

        # S2: regions in flight
        s2_valid = Signal()
        s2 = Signal(pick_layout(p))
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
        with m.Elif(imm & (s2d.dst_offset[:3] != 0)):
            m.d.comb += early.eq(ErrorCode.MISALIGNED)
        with m.Elif((~imm & (se.perms == 0)) | (de.perms == 0)):
            m.d.comb += early.eq(ErrorCode.UNKNOWN_REGION)
        with m.Elif((~imm & ~se.perms[(Perm.READ).bit_length() - 1]) | ~de.perms[(Perm.WRITE).bit_length() - 1]):
            m.d.comb += early.eq(ErrorCode.PERMISSION)

        # S3: bounds and overlap
        s3_valid = Signal()
        s3 = Signal(pick_layout(p))
        s3_imm, s3_same, s3_notify = Signal(), Signal(), Signal()
        s3_early = Signal(CODE_BITS)
        s3_cookie, s3_len = Signal(32), Signal(32)
        s3_src_off, s3_dst_off = Signal(64), Signal(64)
        s3_src_end, s3_dst_end = Signal(65), Signal(65)
        s3_src_size, s3_dst_size = Signal(64), Signal(64)
        s3_src_addr, s3_dst_addr = Signal(64), Signal(64)
        with m.If(adv):
            m.d.sync += [
                s3_valid.eq(s2_valid), s3.eq(s2), s3_imm.eq(imm), s3_early.eq(early),
                s3_same.eq(~imm & (s2d.src_region == s2d.dst_region) & (s2d.length != 0)),
                s3_notify.eq((s2d.flags & Flag.NOTIFY) != 0), s3_cookie.eq(s2d.cookie), s3_len.eq(s2d.length),
                s3_src_off.eq(s2d.src_offset), s3_dst_off.eq(s2d.dst_offset),
                s3_src_end.eq(s2d.src_offset + s2d.length), s3_dst_end.eq(s2d.dst_offset + s2d.length),
                s3_src_size.eq(se.size), s3_dst_size.eq(de.size),
                s3_src_addr.eq(Mux(imm, s2d.src_offset, se.addr + s2d.src_offset)),
                s3_dst_addr.eq(de.addr + s2d.dst_offset),
            ]
        code = Signal(CODE_BITS)
        with m.If(s3_early != 0):
            m.d.comb += code.eq(s3_early)
        with m.Elif((~s3_imm & (s3_src_end > s3_src_size)) | (s3_dst_end > s3_dst_size)):
            m.d.comb += code.eq(ErrorCode.OUT_OF_BOUNDS)
        with m.Elif(s3_same & (s3_src_off < s3_dst_end) & (s3_dst_off < s3_src_end)):
            m.d.comb += code.eq(ErrorCode.OVERLAP)

        j = self.job.payload
        kind = Signal(JobKind)
        with m.If(s3.token):
            m.d.comb += kind.eq(JobKind.ERROR)
        with m.Elif(dropped(self.stops, s3.queue, s3.index, started=False)):
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
            j.length.eq(s3_len),
            adv.eq(~s3_valid | self.job.ready),
        ]
        m.d.comb += [self.stop_valid.eq(adv & s3_valid & (kind == JobKind.ERROR) & ~s3.token),
                     self.stop_queue.eq(s3.queue), self.stop_index.eq(s3.index)]
        m.d.comb += self.idle.eq(~s1_valid & ~s2_valid & ~s3_valid)
        return m
