"""How a run of beats is cut into AXI bursts: at each 4 KiB boundary and at max_burst_beats."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, Value

from rtl.params import PAGE_BYTES

BEATS_BITS = 9  # a burst's beat count: 1..256


def page_bits(data_bytes: int) -> int:
    """Bits of a distance to the next 4 KiB boundary in beats, kept modulo a page (0: a whole page)."""
    return ((PAGE_BYTES // data_bytes) - 1).bit_length() or 1


def to_page(data_bytes: int, addr: Value) -> Value:
    """Beats from `addr` to the next 4 KiB boundary, modulo a page (0: `addr` starts a page)."""
    lg = (data_bytes - 1).bit_length()
    return (-addr[lg:PAGE_BYTES.bit_length() - 1])[:page_bits(data_bytes)]


def cut(m: Module, max_burst_beats: int, pg: Value, left: Value) -> tuple[Signal, Signal]:
    """The next burst of `left` beats (at least 1) starting `pg` beats before a 4 KiB boundary (0: a whole
    page): its beats, and whether it is the last one."""
    maxb = max_burst_beats
    capped, beats, last = Signal(BEATS_BITS), Signal(BEATS_BITS), Signal()
    m.d.comb += [
        capped.eq(Mux((pg != 0) & (pg < maxb), pg, maxb)),
        last.eq((left[BEATS_BITS:] == 0) & (left[:BEATS_BITS] <= capped)),
        beats.eq(Mux(last, left[:BEATS_BITS], capped)),
    ]
    return beats, last
