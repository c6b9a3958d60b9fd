"""The fall-through FIFO (amaranth.sim) against a queue model: entries leave in order, none lost or doubled; while
the FIFO is empty an entry shows on the output in the cycle it arrives; a reader that holds an entry over several
cycles sees it unchanged; the writer's ready never waits on the reader."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth.sim import Simulator  # noqa: E402

from rtl.fall_through import FallThroughFIFO  # noqa: E402

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("fall_through", [True, False])
@pytest.mark.parametrize(("seed", "write_rate", "read_rate"), [(1, 0.3, 0.8), (2, 0.5, 0.9), (3, 0.2, 0.5)])
def test_entries_leave_in_order_and_fall_through_when_empty(seed, write_rate, read_rate, fall_through):
    """Built with fall_through=False (EngineParams' default, the ECP5 board's engine) it is a plain SyncFIFO: an
    entry into an empty FIFO shows only from the next cycle."""
    dut = FallThroughFIFO(16, 4, fall_through)
    rng = random.Random(seed)
    total = 400
    got: list[int] = []
    fell_through_seen = 0

    async def bench(ctx):
        nonlocal fell_through_seen
        sent = 0
        held, hold_for = None, 0  # the entry the reader is holding, cycles it still holds it
        for _ in range(20_000):
            if len(got) == total:
                break
            offer = sent < total and rng.random() < write_rate
            ctx.set(dut.w.valid, offer)
            ctx.set(dut.w.payload, sent)
            level = ctx.get(dut.level)
            valid, value = ctx.get(dut.r.valid), ctx.get(dut.r.payload)
            if offer and level == 0 and fall_through:
                assert valid and value == sent, "an entry into an empty FIFO did not show in its cycle"
                fell_through_seen += 1
            if level == 0 and not fall_through:
                assert not valid, "an empty FIFO built without fall-through showed an entry"
                fell_through_seen += offer
            if held is not None:
                assert valid and value == held, f"the held entry {held} changed to {value}"
            take = False
            if valid:
                if held is None:
                    # a slow reader holds an entry for longer (the write-data generator holds one over a burst)
                    held, hold_for = value, rng.choice([0, 0, 1, 3] if rng.random() < read_rate else [4, 8])
                take = hold_for == 0
                hold_for -= 1
            ctx.set(dut.r.ready, take)
            w_ready = ctx.get(dut.w.ready)
            assert w_ready == (level < 4), "the writer's ready depends on more than the FIFO's room"
            await ctx.tick()
            if offer and w_ready:
                sent += 1
            if take:
                got.append(held)
                held = None

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
    assert got == list(range(total)), "entries lost, doubled or out of order"
    assert fell_through_seen > 10, "the test never offered into an empty FIFO"


def test_depth_is_checked():
    with pytest.raises(ValueError, match="depth"):
        FallThroughFIFO(8, 1)
