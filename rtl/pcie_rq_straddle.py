"""A 512-bit RQ beat with straddling, from its two 256-bit halves (PG213's RQ straddle option): a request starts at
lane 0 or lane 8, so a beat may carry the end of one request and the start of the next. The block finds them by
tuser's is_sop / is_sop_ptr and is_eop / is_eop_ptr, in the order they start or end in the beat; the first and last
byte enables of the beat's first starting request are in [3:0] and [11:8], the second's in [7:4] and [15:12]."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal

from rtl.pcie_streams import RQ512_EOP_PTR, RQ512_IS_EOP, RQ512_IS_SOP, RQ512_SOP_PTR

HALF = 8  # DWORD lanes a half


def _last_lane(keep) -> Signal:
    """The lane of a half's last DWORD (its lanes are contiguous from lane 0)."""
    return sum(keep[i] for i in range(HALF)) - 1


def straddle(m: Module, rq, a: dict, b: dict) -> None:
    """Drive `rq` (512-bit, its tuser 137 bits) with half `a` in lanes 0-7 and half `b` in lanes 8-15. Each half is
    a dict of valid, data (256), keep (8), be (first [3:0], last [7:4]), sop, eop; `a` valid whenever `b` is, and a
    beat's `a` either ends its request or is followed by that request's next half in `b`."""
    on_b = Signal(name="straddle_b")
    sop_a, eop_a = Signal(name="straddle_sop_a"), Signal(name="straddle_eop_a")
    sop_b, eop_b = Signal(name="straddle_sop_b"), Signal(name="straddle_eop_b")
    lane_a, lane_b = Signal(4, name="straddle_lane_a"), Signal(4, name="straddle_lane_b")
    m.d.comb += [on_b.eq(a["valid"] & b["valid"]), sop_a.eq(a["sop"]), eop_a.eq(a["eop"]),
                 sop_b.eq(on_b & b["sop"]), eop_b.eq(on_b & b["eop"]),
                 lane_a.eq(_last_lane(a["keep"])), lane_b.eq(HALF + _last_lane(b["keep"]))]
    first_be = Cat(Mux(sop_a, a["be"][:4], b["be"][:4]), b["be"][:4])
    last_be = Cat(Mux(sop_a, a["be"][4:], b["be"][4:]), b["be"][4:])
    is_sop = Cat(sop_a | sop_b, sop_a & sop_b)
    sop_ptr = Cat(Mux(sop_a, Const(0, 2), Const(2, 2)), Const(2, 2))  # in 128-bit units: lane 0 or lane 8
    is_eop = Cat(eop_a | eop_b, eop_a & eop_b)
    eop_ptr = Cat(Mux(eop_a, lane_a, lane_b), lane_b)
    m.d.comb += [rq.tvalid.eq(a["valid"]),
                 rq.tdata.eq(Cat(a["data"], Mux(on_b, b["data"], 0))),
                 rq.tkeep.eq(Cat(a["keep"], Mux(on_b, b["keep"], 0))),
                 rq.tlast.eq(Mux(on_b, eop_b, eop_a)),
                 rq.tuser.eq(Cat(first_be, last_be, Const(0, RQ512_IS_SOP - 16), is_sop, sop_ptr, is_eop, eop_ptr))]
    assert RQ512_SOP_PTR == RQ512_IS_SOP + 2 and RQ512_IS_EOP == RQ512_SOP_PTR + 4
    assert RQ512_EOP_PTR == RQ512_IS_EOP + 2
