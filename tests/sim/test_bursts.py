"""rtl/bursts.py's `advance`: the address after a burst that does not cross 4 KiB, computed without a carry through the
page number, equals the plain sum for every such burst (and the sum modulo 2^64 at the top of the address space)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth import Module, Signal  # noqa: E402
from amaranth.sim import Simulator  # noqa: E402

from rtl import bursts  # noqa: E402
from rtl.params import PAGE_BYTES  # noqa: E402

pytestmark = pytest.mark.sim


def _cases(data_bytes: int, rng: random.Random) -> list[tuple[int, int]]:
    """(addr, beats) with addr a multiple of the beat and the burst ending at or before the next 4 KiB boundary."""
    page_beats = PAGE_BYTES // data_bytes
    out = []
    for page in (0, 1, 0xFFFF_FFFF, 1 << 51, (1 << 52) - 1, rng.getrandbits(52)):
        for off in (0, 1, page_beats // 2, page_beats - 1):
            room = page_beats - off
            for beats in {0, 1, room, max(1, room // 2), min(room, 256)}:
                if beats <= room and beats < 1 << bursts.BEATS_BITS:
                    out.append((((page << 12) | off * data_bytes) & ((1 << 64) - 1), beats))
    for _ in range(300):
        off = rng.randrange(page_beats)
        out.append(((rng.getrandbits(52) << 12) | off * data_bytes, rng.randint(0, min(page_beats - off, 256))))
    return out


@pytest.mark.parametrize("data_bytes", [8, 32, 64])
def test_advance_is_the_sum_for_every_burst_within_a_page(data_bytes):
    m = Module()
    addr, beats = Signal(64), Signal(bursts.BEATS_BITS)
    after = Signal(64)
    m.d.comb += after.eq(bursts.advance(addr, beats, data_bytes))
    cases = _cases(data_bytes, random.Random(data_bytes))
    wrong = []

    async def bench(ctx):
        for a, b in cases:
            ctx.set(addr, a)
            ctx.set(beats, b)
            got, want = ctx.get(after), (a + b * data_bytes) % (1 << 64)
            if got != want:
                wrong.append((hex(a), b, hex(got), hex(want)))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert len(cases) > 300 and not wrong, wrong[:5]


def _cut_model(max_beats: int, pg: int, left: int) -> tuple[int, bool]:
    capped = pg if 0 < pg < max_beats else max_beats
    return (left, True) if left <= capped else (capped, False)


@pytest.mark.parametrize("data_bytes,max_beats,as_signal", [(8, 256, False), (8, 16, False), (64, 64, False),
                                                             (8, 32, True)])
def test_cut_and_the_address_after_it_match_the_model(data_bytes, max_beats, as_signal):
    """`cut` against its definition, and `advance_by_cut` (three sums, picked by the cut) against the plain sum of
    the burst `cut` chose, for copies that start anywhere in a page and run past it or end inside it; the
    longest burst both as a constant and as a signal (the write planner's, set by the host's max payload)."""
    rp = 12
    page_beats = PAGE_BYTES // data_bytes
    m = Module()
    addr, left = Signal(64), Signal(rp)
    maxb = Signal(range(max_beats + 1)) if as_signal else max_beats
    pg = bursts.to_page(data_bytes, addr)
    c = bursts.cut(m, maxb, pg, left)
    after = Signal(64)
    m.d.comb += after.eq(bursts.advance_by_cut(addr, c, pg, left, maxb, data_bytes))
    rng = random.Random(max_beats * data_bytes)
    cases = []
    for page in (0, 1, (1 << 52) - 1, rng.getrandbits(52)):
        for off in (0, 1, page_beats - max_beats, page_beats - max_beats + 1, page_beats - 1):
            for n in (1, 2, max_beats - 1, max_beats, max_beats + 1, page_beats - off, page_beats - off + 1,
                      (1 << rp) - 1):
                cases.append((((page << 12) | off * data_bytes), n))
    cases += [((rng.getrandbits(52) << 12) | rng.randrange(page_beats) * data_bytes, rng.randint(1, (1 << rp) - 1))
              for _ in range(400)]
    wrong = []

    async def bench(ctx):
        if as_signal:
            ctx.set(maxb, max_beats)
        for a, n in cases:
            ctx.set(addr, a)
            ctx.set(left, n)
            to_page = (-(a // data_bytes)) % page_beats
            beats, last = _cut_model(max_beats, to_page, n)
            got = (ctx.get(c.beats), bool(ctx.get(c.last)), ctx.get(after))
            want = (beats, last, (a + beats * data_bytes) % (1 << 64))
            if got != want:
                wrong.append((hex(a), n, got, want))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert len(cases) > 400 and not wrong, wrong[:5]
