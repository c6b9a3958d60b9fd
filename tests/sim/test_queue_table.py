"""The queue table on its own (amaranth.sim), with the stages around it played by the test: register writes
from the host, picks taken by a validator model that issues them, retirements from a completion model, and
a completion-writer model. Checked against a model of each queue: enable waits for the completion-location
check, every posted slot is picked exactly once and in order (modulo 2^32 from any START), doorbell errors
come as a token after the slots posted before them, the completion word counts retired descriptors and is
due after the last one or a NOTIFY, a halt stops the queue, sets bit 63 and logs the error once."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth.sim import Simulator  # noqa: E402

from driver.abi import QUEUE, ErrorCode  # noqa: E402
from rtl.abi_layouts import bits_of  # noqa: E402
from rtl.queues import Queues  # noqa: E402
from rtl.records import DoneKind  # noqa: E402

pytestmark = pytest.mark.sim
NUM_QUEUES, SLOTS = 2, 16
OFF = {r.name: r.offset for r in QUEUE.registers}
M32 = (1 << 32) - 1


class Harness:
    def __init__(self, ctx, dut, rng):
        self.ctx, self.dut, self.rng = ctx, dut, rng
        self.picks: list[tuple[int, int, int, int]] = []  # (queue, index, token, code)
        self.in_flight: list[list] = []  # [queue, index, token, code, cycles until retired]
        self.logged: list[tuple[int, int, int]] = []  # (code, queue, index)
        self.due: list[tuple[int, int]] = []  # (queue, word) of every completion word taken
        self.halt_at: dict[int, int] = {}  # queue -> the index whose retirement halts it
        self.take_picks = True

    async def write(self, queue: int, name: str, value: int) -> None:
        ctx, regs = self.ctx, self.dut.regs
        ctx.set(regs.w_valid, 1)
        ctx.set(regs.w_index, queue)
        ctx.set(regs.w_offset, OFF[name])
        ctx.set(regs.w_data, value & M32)
        await self.cycle()
        ctx.set(regs.w_valid, 0)

    def read(self, queue: int, name: str) -> int:
        self.ctx.set(self.dut.regs.r_index, queue)
        self.ctx.set(self.dut.regs.r_offset, OFF[name])
        return self.ctx.get(self.dut.regs.r_data)

    async def cycle(self) -> None:
        """One clock of the stages around the table."""
        ctx, dut, rng = self.ctx, self.dut, self.rng
        # validator: takes picks at random, issues descriptors (a token is an error job: issued too)
        ready = self.take_picks and rng.random() < 0.7
        ctx.set(dut.pick.ready, ready)
        issue = None
        if ready and ctx.get(dut.pick.valid):
            pk = ctx.get(dut.pick.payload)
            pick = (int(pk.queue), int(pk.index), int(pk.token), int(pk.code) if pk.token else 0)  # code: tokens only
            self.picks.append(pick)
            issue = pick
            self.in_flight.append([*pick, rng.randrange(2, 12)])
        # completion: retire the oldest once its time has come (in issue order)
        done = None
        if self.in_flight and self.in_flight[0][4] <= 0:
            q, index, token, code, _ = self.in_flight.pop(0)
            halt = token or self.halt_at.get(q) == index
            code = code if token else ErrorCode.OUT_OF_BOUNDS
            done = {"kind": DoneKind.HALT if halt else DoneKind.SUCCESS, "queue": q, "notify": int(rng.random() < 0.2),
                    "code": int(code) if halt else 0, "cookie": 0xC0 + index % 64, "index": index}
        for entry in self.in_flight:
            entry[4] -= 1
        ctx.set(dut.done.valid, done is not None)
        if done is not None:
            ctx.set(dut.done.entry, done)
        # completion writer: takes a due word (as the real one captures it), passes every location check
        dirty, checking = ctx.get(dut.cw.dirty), ctx.get(dut.cw.checking)
        ctx.set(dut.cw.take, 0)
        ctx.set(dut.cw.ok.valid, 0)
        due = [q for q in range(NUM_QUEUES) if (dirty | checking) >> q & 1]
        if due and rng.random() < 0.5:
            q = rng.choice(due)
            ctx.set(dut.cw.take, 1 << q)
            if checking >> q & 1:
                ctx.set(dut.cw.ok.valid, 1)
                ctx.set(dut.cw.ok.queue, q)
            self.due.append((q, ctx.get(dut.cw.word[q])))
        if ctx.get(dut.log.valid):
            e = ctx.get(dut.log.entry)
            self.logged.append((int(e.code), int(e.queue), int(e.index)))
        await ctx.tick()
        ctx.set(dut.issue.valid, issue is not None)
        if issue is not None:
            ctx.set(dut.issue.queue, issue[0])


@pytest.mark.parametrize("seed", range(4))
def test_slots_picked_once_in_order_and_completion_words_follow(seed):
    rng = random.Random(seed)
    dut = Queues(num_queues=NUM_QUEUES, slots=SLOTS)
    starts = [rng.choice([0, rng.randrange(1 << 40), M32 - rng.randrange(8)]) for _ in range(NUM_QUEUES)]
    posted_total = [0] * NUM_QUEUES

    async def bench(ctx):
        h = Harness(ctx, dut, rng)
        ctx.set(dut.engine_enable, 1)
        for q, start in enumerate(starts):
            await h.write(q, "START_LO", start)
            await h.write(q, "START_HI", start >> 32)
            await h.write(q, "CONTROL", 1)
        for _ in range(3):
            await h.cycle()
        for q in range(NUM_QUEUES):
            assert ctx.get(dut.cw.checking) >> q & 1 or ctx.get(dut.enabled) >> q & 1
        # doorbells: random steps, never more than SLOTS ahead of what has completed
        for _ in range(60):
            q = rng.randrange(NUM_QUEUES)
            completed = ctx.get(dut.cw.word[q]) & ((1 << 63) - 1)
            room = SLOTS - ((starts[q] + posted_total[q] - completed) & M32)
            if room > 0:
                posted_total[q] += rng.randrange(0, room + 1)
                await h.write(q, "DOORBELL", starts[q] + posted_total[q])
                assert h.read(q, "DOORBELL") == (starts[q] + posted_total[q]) & M32
            for _ in range(rng.randrange(1, 6)):
                await h.cycle()
        for _ in range(400):
            await h.cycle()
        for q in range(NUM_QUEUES):
            mine = [(i, t) for qq, i, t, _ in h.picks if qq == q]
            assert mine == [((starts[q] + k) & M32, 0) for k in range(posted_total[q])], f"queue {q}: picks"
            word = ctx.get(dut.cw.word[q])
            assert word == starts[q] + posted_total[q], f"queue {q}: completion word {word:#x}"
            assert h.read(q, "COMPLETED_LO") == word & M32 and h.read(q, "COMPLETED_HI") == word >> 32
            assert not ctx.get(dut.busy) >> q & 1 or ctx.get(dut.cw.dirty) >> q & 1
            # the last word taken for the queue is its final word: nothing is left behind
            assert [w for qq, w in h.due if qq == q][-1] == word
        assert h.logged == []

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("seed", range(3))
def test_a_halt_stops_the_queue_and_a_backwards_doorbell_comes_as_a_token(seed):
    rng = random.Random(seed)
    dut = Queues(num_queues=NUM_QUEUES, slots=SLOTS)
    start = rng.randrange(1 << 32)

    async def bench(ctx):
        h = Harness(ctx, dut, rng)
        ctx.set(dut.engine_enable, 1)
        for q in range(2):
            await h.write(q, "START_LO", start)
            await h.write(q, "START_HI", 0)
            await h.write(q, "CONTROL", 1)
        for _ in range(5):
            await h.cycle()
        # queue 0: the descriptor at start+3 fails when it retires (as the completion unit reports it)
        h.halt_at[0] = (start + 3) & M32
        await h.write(0, "DOORBELL", start + 8)
        # queue 1: 4 slots, then a doorbell that goes backwards
        await h.write(1, "DOORBELL", start + 4)
        await h.write(1, "DOORBELL", start + 2)
        for _ in range(300):
            await h.cycle()
        word0 = ctx.get(dut.cw.word[0])
        assert word0 == (1 << 63) | (start + 3), f"queue 0 word {word0:#x}: three done, then halted"
        assert ctx.get(dut.halted) & 1 and h.read(0, "ERROR_INDEX") == (start + 3) & M32
        code = bits_of(QUEUE, "STATUS", "CODE")
        assert h.read(0, "STATUS") >> code.start & ((1 << (code.stop - code.start)) - 1) == ErrorCode.OUT_OF_BOUNDS
        picks1 = [(i, t, c) for q, i, t, c in h.picks if q == 1]
        assert picks1[:4] == [((start + k) & M32, 0, 0) for k in range(4)]
        assert picks1[4] == ((start + 2) & M32, 1, int(ErrorCode.DOORBELL_BACKWARDS)), picks1
        assert len(picks1) == 5
        word1 = ctx.get(dut.cw.word[1])
        assert word1 == (1 << 63) | (start + 4)
        assert sorted(h.logged) == sorted([(int(ErrorCode.OUT_OF_BOUNDS), 0, (start + 3) & M32),
                                           (int(ErrorCode.DOORBELL_BACKWARDS), 1, (start + 2) & M32)])
        assert [w for q, w in h.due if q == 0][-1] == word0 and [w for q, w in h.due if q == 1][-1] == word1

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("ahead", [SLOTS, SLOTS + 1])
def test_a_doorbell_may_run_slots_ahead_and_no_further(ahead):
    """With nothing completed, a doorbell SLOTS ahead is taken; one more is RING_OVERFLOW, raised as a token
    after the slots already posted, and the doorbell register keeps the last good value."""
    rng = random.Random(ahead)
    dut = Queues(num_queues=NUM_QUEUES, slots=SLOTS)
    start = M32 - 5  # the ring wraps modulo 2^32 on the way

    async def bench(ctx):
        h = Harness(ctx, dut, rng)
        ctx.set(dut.engine_enable, 1)
        await h.write(0, "START_LO", start)
        await h.write(0, "CONTROL", 1)
        for _ in range(5):
            await h.cycle()
        h.take_picks = False
        await h.write(0, "DOORBELL", start + SLOTS - 2)
        await h.write(0, "DOORBELL", start + ahead)
        good = start + (ahead if ahead <= SLOTS else SLOTS - 2)
        assert h.read(0, "DOORBELL") == good & M32
        h.take_picks = True
        for _ in range(300):
            await h.cycle()
        picks = [(i, t, c) for q, i, t, c in h.picks if q == 0]
        slots = [((start + k) & M32, 0, 0) for k in range((good - start))]
        if ahead <= SLOTS:
            assert picks == slots and ctx.get(dut.cw.word[0]) == start + ahead
        else:
            assert picks == [*slots, ((start + ahead) & M32, 1, int(ErrorCode.RING_OVERFLOW))]
            assert ctx.get(dut.cw.word[0]) == (1 << 63) | good

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("seed", range(3))
def test_doorbell_checks_count_from_what_has_completed(seed):
    """A doorbell at every edge of its two checks, with slots completed and others still posted, from STARTs
    near the 2^32 wrap: taken when the value is neither behind `posted` nor more than SLOTS past `completed`,
    else the error comes as a token after the slots posted before it."""
    rng = random.Random(100 + seed)
    dut = Queues(num_queues=NUM_QUEUES, slots=SLOTS)
    edges = [0, 1, SLOTS - 1, SLOTS, SLOTS + 1, SLOTS + 2, (1 << 31) - 1, 1 << 31, M32]

    async def bench(ctx):
        h = Harness(ctx, dut, rng)
        ctx.set(dut.engine_enable, 1)
        for _ in range(8):
            q = rng.randrange(NUM_QUEUES)
            start = rng.choice([rng.randrange(1 << 32), M32 - rng.randrange(2 * SLOTS)])
            await h.write(q, "CONTROL", 0)
            for _ in range(20):
                await h.cycle()
            await h.write(q, "START_LO", start)
            await h.write(q, "START_HI", 0)
            await h.write(q, "CONTROL", 1)
            for _ in range(5):
                await h.cycle()
            first = len(h.picks)
            done, waiting = rng.randrange(SLOTS + 1), 0
            await h.write(q, "DOORBELL", start + done)
            for _ in range(200):
                await h.cycle()
            assert ctx.get(dut.cw.word[q]) == start + done, (start, done, h.picks[first:], ctx.get(dut.enabled), ctx.get(dut.busy))
            h.take_picks = False
            waiting = rng.randrange(SLOTS - done + 1) if done < SLOTS else 0
            await h.write(q, "DOORBELL", start + done + waiting)
            x = rng.choice(edges)
            value = (start + done + x) & M32
            await h.write(q, "DOORBELL", value)
            backwards = (x - waiting) & M32 >= 1 << 31
            taken = not backwards and x <= SLOTS
            posted = value if taken else (start + done + waiting) & M32
            assert h.read(q, "DOORBELL") == posted, f"start {start:#x}, {done} done, {waiting} waiting, +{x:#x}"
            h.take_picks = True
            for _ in range(200):
                await h.cycle()
            mine = [(i, t, c) for qq, i, t, c in h.picks[first:] if qq == q]
            count = (posted - start) & M32
            want = [((start + k) & M32, 0, 0) for k in range(count)]
            if not taken:
                code = ErrorCode.DOORBELL_BACKWARDS if backwards else ErrorCode.RING_OVERFLOW
                want.append((value, 1, int(code)))
            assert mine == want, f"start {start:#x}, {done} done, {waiting} waiting, +{x:#x}"

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
