"""RcRealign: the 512-bit RC stream with straddling (PG213's RC straddle option, two segments: a completion starts at
lane 0 or lane 8, so a beat may carry the end of one and the start of the next) as one completion a beat, its
3-DWORD descriptor beside the data and the data from lane 0: what the requester takes at two beats per 128-byte
completion, where the unstraddled stream needs three (the descriptor's lanes push the data into a third beat).

The input's completions are found by tuser's is_sop / is_sop_ptr and is_eop / is_eop_ptr (two of each at most), as
the block marks them. Each output beat holds up to 16 data DWORDs of one completion (`tkeep` from lane 0), `sop` and
the descriptor (`hdr`) on its first, `tlast` on its last; a completion with no data is one beat with no lanes kept.

The data of the completion being taken is read from a 32-DWORD window: the previous input beat and the current one,
from `at`. A healthy completion of 64-byte multiples, starting at lane 0 or 8, ends in the lane just below where its
data starts in the window, so each input beat after its first gives exactly one output beat and a beat where one
ends and the next starts is taken in one cycle. Other shapes (a descriptor alone, a completion ending elsewhere, two
completions ending in one beat) hold the input beat for a cycle or two, an output beat each.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.pcie_requests import lanes_mask
from rtl.pcie_streams import RC512_EOP_PTR, RC512_IS_EOP, RC512_IS_SOP, RC512_SOP_PTR, axis_signature, layout

LANES = 16
HEADER = 3  # DWORDs of an RC descriptor


def aligned_signature() -> wiring.Signature:
    """One completion a beat, from its source's side: data DWORDs from lane 0 (`tkeep`), the descriptor on the first."""
    return wiring.Signature({"tdata": Out(32 * LANES), "tkeep": Out(LANES), "tlast": Out(1), "sop": Out(1),
                             "hdr": Out(32 * HEADER), "tvalid": Out(1), "tready": In(1)})


class RcRealign(wiring.Component):
    def __init__(self):
        super().__init__({"rc": In(axis_signature(512, layout(512).rc_user_bits)), "out": Out(aligned_signature())})

    def elaborate(self, platform):
        m = Module()
        rc, out = self.rc, self.out
        user = rc.tuser
        sops = [user[RC512_IS_SOP + k] for k in range(2)]
        eops = [user[RC512_IS_EOP + k] for k in range(2)]
        sop_lane = [Cat(Signal(2, init=0), user[RC512_SOP_PTR + 2 * k:RC512_SOP_PTR + 2 * k + 2]) for k in range(2)]
        eop_lane = [user[RC512_EOP_PTR + 4 * k:RC512_EOP_PTR + 4 * k + 4] for k in range(2)]
        n_sops, n_eops = Signal(2), Signal(2)
        m.d.comb += [n_sops.eq(Mux(sops[0], 1 + sops[1], 0)), n_eops.eq(Mux(eops[0], 1 + eops[1], 0))]

        carry = Signal(32 * LANES)  # the previous input beat
        at = Signal(range(2 * LANES + 1))  # the active completion's next data DWORD in the window
        act = Signal()  # a completion is being taken
        first = Signal()  # its next output beat is its first
        hdr = Signal(32 * HEADER)
        k_sop, k_eop = Signal(2), Signal(2)  # the current input beat's starts and ends already taken
        window = Cat(carry, rc.tdata, Const(0, 32 * LANES))

        # the active completion's end in this beat (the next end not yet taken), and the beat's next start
        ends_here, end_at = Signal(), Signal(range(2 * LANES))  # (end_at: its last DWORD's place in the window)
        starts_here, start_lane = Signal(), Signal(4)
        m.d.comb += [ends_here.eq(act & (k_eop < n_eops)),
                     end_at.eq(LANES + Mux(k_eop == 0, eop_lane[0], eop_lane[1])),
                     starts_here.eq(k_sop < n_sops), start_lane.eq(Mux(k_sop == 0, sop_lane[0], sop_lane[1]))]
        # a start's own end: the first end after the one the active completion takes
        k_after = Signal(3)
        start_ends, start_end_lane = Signal(), Signal(4)
        m.d.comb += [k_after.eq(k_eop + ends_here), start_ends.eq(k_after < n_eops),
                     start_end_lane.eq(Mux(k_after == 0, eop_lane[0], eop_lane[1]))]
        left = Signal(range(2 * LANES + 1))  # the active completion's DWORDs left, when it ends in this beat
        m.d.comb += left.eq(end_at + 1 - at)
        start_hdr = Signal(32 * HEADER)
        m.d.comb += start_hdr.eq(rc.tdata.bit_select(start_lane * 32, 32 * HEADER))
        start_data = LANES + HEADER + start_lane  # a start's first data DWORD in the window

        # this cycle's plan: an output beat (emit), the input beat done (consume), the state after
        emit, consume = Signal(), Signal()
        count, out_at = Signal(range(LANES + 1)), Signal(range(2 * LANES + 1))
        out_last, out_sop, out_hdr = Signal(), Signal(), Signal(32 * HEADER)
        n_act, n_first, n_at, n_hdr = Signal(), Signal(), Signal.like(at), Signal.like(hdr)
        n_k_sop, n_k_eop = Signal(2), Signal(2)
        m.d.comb += [n_act.eq(act), n_first.eq(first), n_at.eq(at), n_hdr.eq(hdr), n_k_sop.eq(k_sop),
                     n_k_eop.eq(k_eop)]

        def output(at_, count_, last, sop, header):
            m.d.comb += [emit.eq(1), out_at.eq(at_), count.eq(count_), out_last.eq(last), out_sop.eq(sop),
                         out_hdr.eq(header), n_first.eq(0)]

        def start(slot_free: bool):
            """The beat's next start: its descriptor taken; ending in this beat too, it is sent now if the output
            is free (the beat done unless another start follows), else the beat is held for it."""
            m.d.comb += [n_hdr.eq(start_hdr), n_first.eq(1), n_k_sop.eq(k_sop + 1), n_act.eq(1)]
            with m.If(start_ends):
                if slot_free:
                    output(start_data, start_end_lane + 1 - start_lane - HEADER, 1, 1, start_hdr)
                    m.d.comb += [n_act.eq(0), n_k_eop.eq(k_after + 1), consume.eq(k_sop + 1 >= n_sops)]
                else:
                    m.d.comb += [n_at.eq(start_data), n_k_eop.eq(k_after)]
            with m.Else():
                m.d.comb += [n_at.eq(start_data - LANES), consume.eq(1)]

        with m.If(act):
            with m.If(ends_here):
                with m.If(left <= LANES):  # its last output beat; then the beat's next start, if any
                    output(at, left, 1, first, hdr)
                    m.d.comb += [n_act.eq(0), n_k_eop.eq(k_eop + 1)]
                    with m.If(starts_here):
                        start(slot_free=False)
                    with m.Else():
                        m.d.comb += consume.eq(1)
                with m.Else():  # more than an output beat left in this beat: it is held
                    output(at, LANES, 0, first, hdr)
                    m.d.comb += n_at.eq(at + LANES)
            with m.Elif(at <= LANES):  # a whole output beat from the window; the beat becomes the carry
                output(at, LANES, 0, first, hdr)
                m.d.comb += consume.eq(1)
            with m.Else():  # fewer than an output beat's DWORDs in this beat: carried
                m.d.comb += [consume.eq(1), n_at.eq(at - LANES)]
        with m.Elif(starts_here):
            start(slot_free=True)
        with m.Else():
            m.d.comb += consume.eq(1)

        fire = Signal()  # the plan is carried out: the input beat is there and the output, if any, is taken
        m.d.comb += [fire.eq(rc.tvalid & (~emit | out.tready)),
                     out.tvalid.eq(rc.tvalid & emit),
                     out.tdata.eq(window.bit_select(out_at * 32, 32 * LANES)),
                     out.tkeep.eq(lanes_mask(count, LANES)), out.tlast.eq(out_last), out.sop.eq(out_sop),
                     out.hdr.eq(out_hdr),
                     rc.tready.eq(fire & consume)]
        with m.If(fire):
            m.d.sync += [act.eq(n_act), first.eq(n_first), at.eq(n_at), hdr.eq(n_hdr), k_sop.eq(n_k_sop),
                         k_eop.eq(n_k_eop)]
            with m.If(consume):
                m.d.sync += [carry.eq(rc.tdata), k_sop.eq(0), k_eop.eq(0)]
        return m
