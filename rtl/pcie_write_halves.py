"""The write sender's requests as 256-bit halves, two a cycle: what the 512-bit RQ stream carries with straddling,
where a request may start at either half of a beat (rtl/pcie_rq_straddle.py packs the halves into beats).

A request is a run of halves: its first holds the 4-DWORD descriptor and up to four DWORDs of data, every later
one up to eight. `h0` is the next half to send and `h1` the one after it (of the same request, or the next
request's first half, from this burst or the next one), each with its packet marks; `take` (0, 1 or 2) says
how many of them leave this cycle. `in_tlp`: `h0` continues a request (it is always valid then). The sender's
state is stepped once per half taken, so two halves a cycle need two copies of the step: `_step` below, the
second fed with the first's outcome.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

from rtl.pcie_requests import MEM_WRITE, lanes_mask, rq_header

HALF = 8  # DWORDs in half a 512-bit beat


def half_signature() -> wiring.Signature:
    """One half of a straddled RQ beat, from its source's side: its DWORDs, their lanes, the request's byte enables
    (first in [3:0], last in [7:4]), whether the request starts or ends in it."""
    return wiring.Signature({"valid": Out(1), "data": Out(32 * HALF), "keep": Out(HALF), "be": Out(8),
                             "sop": Out(1), "eop": Out(1)})


@dataclass
class Gather:
    """What the halves are cut from: the write sender's two gather buffers (rows of `lb`-bit DWORD lanes, `rb`
    row-index bits), each buffer's burst (Arrays indexed by buffer) and the buffer being sent (`s_at`)."""
    buf: Memory
    lb: int
    rb: int
    pos_shape: range
    busy: Array
    full: Array
    sent: Array
    addr: Array
    count: Array
    first_dw: Array
    end_dw: Array
    first_be: Array
    end_be: Array
    s_at: Signal
    lane0: object  # addr -> the DWORD lane of a burst's first beat in its first row
    per_beat: int  # DWORDs an engine beat carries
    # the W beat written in this cycle (not a burst's first, nor a last one with strobes short of its end), so a
    # request whose data it completes may start now: its buffer, whether it is the burst's last, its last DWORD
    w_in: Signal
    w_buf: Signal
    w_last: Signal
    w_end: Signal


@dataclass
class State:
    mid: object  # the burst's first request is out, its last not yet
    dw: object  # the next DWORD to send (while mid)
    in_tlp: object  # a request's later halves are going out
    left: object  # its DWORDs still to go
    be: object  # its byte enables
    last: object  # it is the burst's last
    s: object  # the buffer being sent


def _step(m: Module, g: Gather, k: int, st: State, mps_dwords) -> tuple[dict, State, Signal, Signal]:
    """The half sent from state `st`, the state after it, whether it ends its burst, and whether (a later half of a
    request) its DWORDs are still being written."""
    def sig(shape, name):
        return Signal(shape, name=f"h{k}_{name}")

    s = st.s
    cur = sig(g.pos_shape, "cur")
    m.d.comb += cur.eq(Mux(st.mid, st.dw, g.first_dw[s]))
    port_a, port_b = g.buf.read_port(domain="comb"), g.buf.read_port(domain="comb")
    row = cur[g.lb:g.lb + g.rb]
    m.d.comb += [port_a.addr.eq(Cat(row, s)), port_b.addr.eq(Cat((row + 1)[:g.rb], s))]
    window = sig(32 * HALF, "window")
    m.d.comb += window.eq((Cat(port_a.data, port_b.data) >> (cur[:g.lb] * 32))[:32 * HALF])

    row_bytes = 4 << g.lb
    tlp_addr = sig(64, "addr")
    m.d.comb += tlp_addr.eq((g.addr[s] & ~Const(row_bytes - 1, 64)) + (cur << 2))
    room, left = sig(range(1024 + 1), "room"), sig(g.pos_shape, "left")
    n, last = sig(range(1024 + 1), "n"), sig(1, "last")
    # a request may start in the cycle the W beat that completes its data is written: its header half carries only
    # DWORDs already in the buffer, and the half after it goes in that cycle only if its DWORDs are too
    incoming, full = sig(1, "incoming"), sig(1, "full")
    m.d.comb += [incoming.eq(g.w_in & (g.w_buf == s)), full.eq(g.full[s] | (incoming & g.w_last))]
    end_be = Mux(g.full[s], g.end_be[s], 0xF)
    # each request is as long as the payload size allows, from where the last one ended, and stops at 4 KiB
    to_page = sig(11, "to_page")
    m.d.comb += to_page.eq(1024 - tlp_addr[2:12])
    m.d.comb += [room.eq(Mux(to_page < mps_dwords, to_page, mps_dwords)),
                 left.eq(Mux(g.full[s], g.end_dw[s], g.w_end) - cur + 1),
                 last.eq(full & (left <= room)),
                 n.eq(Mux(last, left, room))]
    gathered = g.lane0(g.addr[s]) + g.count[s] * g.per_beat  # DWORDs in the buffer (one past the last)
    head_data = Mux(n > HALF - 4, HALF - 4, n)  # a first half's DWORDs of data
    more = Mux(st.left > HALF, HALF, st.left)  # a later half's
    ready = sig(1, "ready")
    m.d.comb += ready.eq(g.busy[s] & ~g.sent[s] & (g.count[s] != 0) & (cur + head_data <= gathered)
                         & (full | (cur + room <= gathered + Mux(incoming, g.per_beat, 0))))
    fresh = sig(1, "fresh")  # a later half whose DWORDs are not all in the buffer yet
    m.d.comb += fresh.eq(st.in_tlp & incoming & (st.dw + more > gathered))
    fbe = Mux(~st.mid, g.first_be[s], 0xF) & Mux((n == 1) & last, end_be, 0xF)
    lbe = Mux(n == 1, 0, Mux(last, end_be, 0xF))
    be = sig(8, "be")
    m.d.comb += be.eq(Cat(fbe, lbe))

    out = {"valid": Mux(st.in_tlp, 1, ready),
           "data": Mux(st.in_tlp, window,
                       Cat(rq_header(tlp_addr, n, MEM_WRITE, Const(0, 8)), window[:32 * HALF - 128])),
           "keep": Mux(st.in_tlp, lanes_mask(st.left, HALF), lanes_mask(4 + head_data, HALF)),
           "be": Mux(st.in_tlp, st.be, be), "sop": ~st.in_tlp,
           "eop": Mux(st.in_tlp, st.left <= HALF, n <= HALF - 4)}
    finish = sig(1, "finish")
    m.d.comb += finish.eq(Mux(st.in_tlp, (st.left <= HALF) & st.last, (n <= HALF - 4) & last))
    after = State(mid=sig(1, "mid"), dw=sig(g.pos_shape, "dw"), in_tlp=sig(1, "in_tlp"),
                  left=sig(range(1024 + 1), "tlp_left"), be=sig(8, "tlp_be"), last=sig(1, "tlp_last"), s=sig(len(g.s_at), "s"))
    m.d.comb += [after.mid.eq(~finish),
                 after.dw.eq(Mux(st.in_tlp, st.dw + more, cur + head_data)),
                 after.in_tlp.eq(Mux(st.in_tlp, st.left > HALF, n > HALF - 4)),
                 after.left.eq(Mux(st.in_tlp, st.left - more, n - head_data)),
                 after.be.eq(Mux(st.in_tlp, st.be, be)),
                 after.last.eq(Mux(st.in_tlp, st.last, last)),
                 after.s.eq(Mux(finish, s + 1, s))]
    return out, after, finish, fresh


def send_halves(m: Module, g: Gather, mps_dwords, h0, h1, take, in_tlp_out, sample_mps) -> None:
    """The sender's state, its two halves `h0` and `h1` (half_signature interfaces) and their `take`;
    `sample_mps` (statements) runs while no burst is being cut and nothing leaves."""
    state = State(mid=Signal(name="mid"), dw=Signal(g.pos_shape, name="dw"), in_tlp=Signal(name="in_tlp"),
                  left=Signal(range(1024 + 1), name="tlp_left"), be=Signal(8, name="tlp_be"),
                  last=Signal(name="tlp_last"), s=g.s_at)
    # A first half is never `fresh` (a request starts only once the beat being written completes its data); a second
    # one is only behind a header in the first, and a request partway out must fill its beat, so that header waits.
    first, after_first, finish_first, _ = _step(m, g, 0, state, mps_dwords)
    second, after_second, finish_second, second_fresh = _step(m, g, 1, after_first, mps_dwords)
    for port, half in ((h0, first), (h1, second)):
        m.d.comb += [getattr(port, name).eq(value) for name, value in half.items()]
    m.d.comb += [h0.valid.eq(first["valid"] & ~second_fresh),
                 h1.valid.eq(first["valid"] & second["valid"] & ~second_fresh), in_tlp_out.eq(state.in_tlp)]

    def advance(to: State):
        m.d.sync += [state.mid.eq(to.mid), state.dw.eq(to.dw), state.in_tlp.eq(to.in_tlp), state.left.eq(to.left),
                     state.be.eq(to.be), state.last.eq(to.last), g.s_at.eq(to.s)]

    with m.If(take != 0):
        with m.If(finish_first):
            m.d.sync += g.sent[state.s].eq(1)
        with m.If(take == 1):
            advance(after_first)
        with m.Else():
            advance(after_second)
            with m.If(finish_second):
                m.d.sync += g.sent[after_first.s].eq(1)
    with m.Elif(~state.mid):
        m.d.sync += sample_mps
