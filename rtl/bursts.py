"""How a run of beats is cut into AXI bursts: at each 4 KiB boundary (or each boundary of a smaller power-of-two
span) and at max_burst_beats."""

from __future__ import annotations

from typing import NamedTuple

from amaranth import Cat, Const, Module, Mux, Signal, Value

from rtl.params import PAGE_BYTES

PAGE_SHIFT = PAGE_BYTES.bit_length() - 1  # an address's page number starts at this bit

BEATS_BITS = 9  # a burst's beat count: 1..256


def page_bits(data_bytes: int, span_bytes: int = PAGE_BYTES) -> int:
    """Bits of a distance to the next `span_bytes` boundary in beats, kept modulo the span (0: a whole span)."""
    return ((span_bytes // data_bytes) - 1).bit_length() or 1


def to_page(data_bytes: int, addr: Value, span_bytes: int = PAGE_BYTES) -> Value:
    """Beats from `addr` to the next `span_bytes` boundary (4 KiB unless said), modulo the span (0: `addr` starts
    one)."""
    lg = (data_bytes - 1).bit_length()
    if span_bytes <= data_bytes:  # every beat is a span of its own
        return Const(0, 1)
    return (-addr[lg:span_bytes.bit_length() - 1])[:page_bits(data_bytes, span_bytes)]


class Cut(NamedTuple):
    beats: Signal
    last: Signal
    at_page: Signal  # a burst that is not the last ends on the boundary (else it is max_burst_beats long)


def cut(m: Module, max_burst_beats: int | Value, pg: Value, left: Value) -> Cut:
    """The next burst of `left` beats (at least 1) starting `pg` beats before a 4 KiB boundary (0: a whole
    page): its beats, and whether it is the last one."""
    maxb = max_burst_beats
    short = left[:BEATS_BITS]
    at_page, beats, last = Signal(), Signal(BEATS_BITS), Signal()
    m.d.comb += [
        at_page.eq((pg != 0) & (pg < maxb)),
        # `left` is compared with both limits beside the page test, which then picks a result, not an operand
        last.eq((left[BEATS_BITS:] == 0) & Mux(at_page, short <= pg, short <= maxb)),
        beats.eq(Mux(last, short, Mux(at_page, pg, maxb))),
    ]
    return Cut(beats, last, at_page)


def advance_by_cut(addr: Value, c: Cut, pg: Value, left: Value, max_burst_beats: int | Value,
                   data_bytes: int) -> Value:
    """`advance(addr, c.beats, data_bytes)` for the burst `cut` made from `pg` and `left`, with each of its three
    lengths (the rest of the copy, to the boundary, max_burst_beats) added from registers beside the cut, whose
    tests then only choose a sum. To the boundary, the sum is the boundary itself."""
    boundary = Cat(Const(0, PAGE_SHIFT), _next_page(addr))
    return Mux(c.last, advance(addr, left[:BEATS_BITS], data_bytes),
               Mux(c.at_page, boundary, advance(addr, max_burst_beats, data_bytes)))


def advance(addr: Value, beats: Value, data_bytes: int) -> Value:
    """The address after a burst of `beats` from `addr` that ends at or before the next 4 KiB boundary (every burst
    `cut` makes): the beats are added to the page offset alone, and the page number gains 1 only where the burst
    ends on the boundary. So no carry runs from the cut through the upper bits: their increment comes from the
    register alone, beside the cut, and the cut only picks it."""
    lg = (data_bytes - 1).bit_length()
    low = addr[:PAGE_SHIFT] + (beats << lg)  # at most 4096: the top bit only where the burst ends on the boundary
    return Cat(low[:PAGE_SHIFT], Mux(low[PAGE_SHIFT], _next_page(addr), addr[PAGE_SHIFT:]))


def _next_page(addr: Value) -> Value:
    """The page number of `addr` plus one, modulo the address width."""
    high = addr[PAGE_SHIFT:]
    return (high + 1)[:len(high)]
