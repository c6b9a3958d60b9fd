"""The head-register FIFO (amaranth.sim) against amaranth's SyncFIFO of the same width and depth, cycle for cycle:
the same `w.ready`, `r.valid` and `level` every cycle and the same `r.payload` whenever `r.valid` (with the whole
entry in the head register, and with some bits read from the storage instead), under random writers and readers."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth import Module  # noqa: E402
from amaranth.lib.fifo import SyncFIFO  # noqa: E402
from amaranth.sim import Simulator  # noqa: E402

from rtl.head_fifo import HeadFIFO  # noqa: E402

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("slow", [None, [(3, 9), (12, 14)]])
@pytest.mark.parametrize("depth", [2, 3, 4, 8])
@pytest.mark.parametrize(("seed", "write_rate", "read_rate"), [(1, 0.3, 0.8), (2, 0.5, 0.9), (3, 0.9, 0.3),
                                                                (4, 0.7, 0.7), (5, 1.0, 1.0)])
def test_same_as_syncfifo_every_cycle(depth, seed, write_rate, read_rate, slow):
    m = Module()
    dut = m.submodules.dut = HeadFIFO(16, depth, slow)
    ref = m.submodules.ref = SyncFIFO(width=16, depth=depth)
    rng = random.Random(seed * 100 + depth)
    cycles = 3000
    stats = {"full": 0, "empty_push": 0, "both": 0}

    async def bench(ctx):
        value = 0
        for _ in range(cycles):
            offer = rng.random() < write_rate
            take = rng.random() < read_rate
            value = rng.randrange(1 << 16)
            for s, v in ((dut.w.valid, offer), (ref.w_en, offer), (dut.w.payload, value), (ref.w_data, value),
                         (dut.r.ready, take), (ref.r_en, take)):
                ctx.set(s, v)
            level = ctx.get(ref.level)
            assert ctx.get(dut.level) == level
            assert ctx.get(dut.w.ready) == ctx.get(ref.w_rdy)
            assert ctx.get(dut.r.valid) == ctx.get(ref.r_rdy)
            if ctx.get(ref.r_rdy):
                assert ctx.get(dut.r.payload) == ctx.get(ref.r_data)
            stats["full"] += level == depth
            stats["empty_push"] += level == 0 and offer
            stats["both"] += 0 < level < depth and offer and take
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
    assert stats["empty_push"] > 0 and stats["both"] > 0 or write_rate == 1.0
    if write_rate > read_rate:
        assert stats["full"] > 0


def test_depth_and_slow_bits_are_checked():
    with pytest.raises(ValueError, match="depth"):
        HeadFIFO(8, 1)
    with pytest.raises(ValueError, match="slow"):
        HeadFIFO(8, 4, [(0, 8)])
    with pytest.raises(ValueError, match="slow"):
        HeadFIFO(8, 4, [(6, 9)])
