"""The completion writer on its own in amaranth.sim, against a Python model of the queue table's dirty bits:
every word that falls due reaches the bus, and the last word written for a queue is its latest word."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth.sim import Simulator  # noqa: E402

from driver.abi import Perm  # noqa: E402
from rtl.completion_writer import CompletionWriter  # noqa: E402

pytestmark = pytest.mark.sim


def _taken(bits: int) -> tuple[int, int]:
    """The writer's `take` (one bit per queue): whether a word was taken, and whose; never two at once."""
    assert bits & (bits - 1) == 0, f"two queues' words taken at once: {bits:#x}"
    return int(bits != 0), bits.bit_length() - 1 if bits else 0


NUM_QUEUES = 4
BASE = 0x1000


@pytest.mark.parametrize("pick_ahead", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_every_due_word_reaches_memory(seed, pick_ahead):
    """Queues fall due at random (as completions and halts set their dirty bits) while the writer serves
    others; the model keeps the dirty bits as the queue table does (take clears, a later event sets).
    Regression: `take` named the queue served before, so a word due on it after its capture was lost."""
    dut = CompletionWriter(num_queues=NUM_QUEUES, data_width=64, pick_ahead=pick_ahead)
    rng = random.Random(seed)
    nq = NUM_QUEUES
    words = [0] * nq
    dirty = [False] * nq
    memory: dict[int, int] = {}

    async def bench(ctx):
        ctx.set(dut.region.entry.perms, int(Perm.WRITE))
        ctx.set(dut.region.entry.addr, BASE)
        ctx.set(dut.region.entry.size, 64 * nq)
        for q in range(nq):
            ctx.set(dut.queues.compl_region[q], 1)
            ctx.set(dut.queues.compl_offset[q], 64 * q)
        ctx.set(dut.bus.aw.ready, 1)
        pending_aw: list[int] = []
        responses = 0  # writes done, response not yet given
        for cycle in range(3000):
            events = [q for q in range(nq) if cycle < 2500 and rng.random() < 0.08]
            for q in range(nq):
                ctx.set(dut.queues.word[q], words[q])
            ctx.set(dut.queues.dirty, sum(1 << q for q in range(nq) if dirty[q]))
            ctx.set(dut.bus.w.ready, int(bool(pending_aw)))  # a beat goes after its address, as the mux orders
            respond = responses > 0 and rng.random() < 0.5
            ctx.set(dut.bus.b.valid, int(respond))
            take, taken = _taken(ctx.get(dut.queues.take))
            aw = ctx.get(dut.bus.aw.valid)
            aw_addr = ctx.get(dut.bus.aw.payload.addr)
            if ctx.get(dut.bus.w.valid) and pending_aw:
                data, strb = ctx.get(dut.bus.w.payload.data), ctx.get(dut.bus.w.payload.strb)
                assert strb == 0xFF
                memory[pending_aw.pop(0)] = data
                responses += 1
            if aw:
                pending_aw.append(aw_addr)
            responses -= int(respond)
            await ctx.tick()
            if take:
                dirty[taken] = False
            for q in events:  # a completion: the count moves on and the word falls due (after take: wins)
                words[q] += 1
                dirty[q] = True
        assert not any(dirty), f"words still due at the end: {dirty}"
        for q in range(nq):
            assert memory.get(BASE + 64 * q) == words[q], (
                f"queue {q}: memory holds {memory.get(BASE + 64 * q)}, its word is {words[q]}")

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("pick_ahead", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_a_taken_word_is_held_until_its_write_is_issued(seed, pick_ahead):
    """From `take` (the queue's dirty bit clears) until `issue` (the write counts as outstanding) the writer
    says it holds that queue's word, under random backpressure on the address channel; the queue stays busy
    meanwhile. Regression: STATUS.BUSY fell in that gap, so an enable returned while memory still held the
    old (halted) word and the host, reading it, stopped posting: error-log entries went missing."""
    dut = CompletionWriter(num_queues=NUM_QUEUES, data_width=64, pick_ahead=pick_ahead)
    rng = random.Random(seed)
    nq = NUM_QUEUES
    holding: dict[int, bool] = {}

    async def bench(ctx):
        ctx.set(dut.region.entry.perms, int(Perm.WRITE))
        ctx.set(dut.region.entry.addr, BASE)
        ctx.set(dut.region.entry.size, 64 * nq)
        ctx.set(dut.bus.w.ready, 1)
        ctx.set(dut.bus.b.valid, 0)
        for q in range(nq):
            ctx.set(dut.queues.compl_region[q], 1)
            ctx.set(dut.queues.compl_offset[q], 64 * q)
        dirty = 0
        takes = issues = 0
        for cycle in range(1500):
            if rng.random() < 0.1:
                dirty |= 1 << rng.randrange(nq)
            ctx.set(dut.queues.dirty, dirty)
            ctx.set(dut.bus.aw.ready, int(rng.random() < 0.3))
            ctx.set(dut.bus.b.valid, int(issues > 0 and rng.random() < 0.5))
            take, taken = _taken(ctx.get(dut.queues.take))
            issue, issued = ctx.get(dut.queues.issue.valid), ctx.get(dut.queues.issue.queue)
            hold, held = ctx.get(dut.queues.hold.valid), ctx.get(dut.queues.hold.queue)
            for q, waiting in holding.items():
                if waiting:
                    assert hold and held == q, f"cycle {cycle}: queue {q}'s word taken, not issued, not held"
            if issue:
                holding[issued] = False
                issues += 1
            await ctx.tick()
            if take:
                dirty &= ~(1 << taken)
                holding[taken] = True
                takes += 1
        assert takes > 20 and issues > 20

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
