"""The read engine on its own (amaranth.sim), against a Python model: every copy is read in bursts that
never cross a 4 KiB boundary nor exceed max_burst_beats, that cover exactly its source rows in order, land
in consecutive buffer rows, and never run ahead of the rows and read IDs returned; jobs pass through in
order, a stopped queue's copy as DROP with no read."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth.sim import Simulator  # noqa: E402

from rtl.params import EngineParams  # noqa: E402
from rtl.read_engine import ReadEngine  # noqa: E402
from rtl.records import JobKind  # noqa: E402
from tests.sim.streams import stream_get, stream_put  # noqa: E402

pytestmark = pytest.mark.sim
PAGE = 4096


def params(data_width: int) -> EngineParams:
    return EngineParams(data_width=data_width, num_queues=2, slots=16, num_regions=8, reads_outstanding=4,
                        writes_outstanding=8, buffer_bytes=1024 if data_width == 64 else 2048, max_burst_beats=8)


def plan(p: EngineParams, src: int, length: int) -> dict:
    """The job as the validator plans it: rows spanned, and the first burst."""
    db = p.data_bytes
    nrows = ((src % db) + length + db - 1) // db
    to_page = (-(src // db)) % (PAGE // db)
    cap = to_page if 0 < to_page < p.max_burst_beats else p.max_burst_beats
    rbeats = min(nrows, cap)
    return {"nrows": nrows, "rbeats": rbeats, "rlast": int(rbeats == nrows)}


def model_bursts(p: EngineParams, src: int, nrows: int) -> list[tuple[int, int]]:
    """(address, beats) of every burst of a copy."""
    db = p.data_bytes
    addr, left, out = src & ~(db - 1), nrows, []
    while left:
        to_page = (PAGE - addr % PAGE) // db
        beats = min(left, to_page, p.max_burst_beats)
        out.append((addr, beats))
        addr += beats * db
        left -= beats
    return out


@pytest.mark.parametrize(("data_width", "seed"), [(64, 1), (64, 2), (512, 3)])
def test_bursts_rows_and_credits_match_the_model(data_width, seed):
    p = params(data_width)
    dut = ReadEngine(num_queues=p.num_queues, data_width=p.data_width, reads_outstanding=p.reads_outstanding,
                     buffer_rows=p.buffer_rows, row_ptr_width=p.row_ptr_width, max_burst_beats=p.max_burst_beats)
    rng = random.Random(seed)
    jobs = []
    rows_cap = p.buffer_rows
    while len(jobs) < 40:
        src = rng.choice([rng.randrange(1 << 20), PAGE - rng.randrange(1, 200), rng.randrange(64) * PAGE])
        length = rng.choice([0, 1, rng.randrange(1, 300), rng.randrange(1, p.buffer_bytes + 1)])
        if plan(p, src, length)["nrows"] > rows_cap:
            continue  # the validator splits copies larger than the buffer before they reach this block
        jobs.append((src, length, rng.random() < 0.15))
    got_bursts: list[tuple[int, int, int]] = []  # (address, beats, first row)
    got_jobs: list[dict] = []
    most_rows_held = [0]

    async def source(ctx):
        for i, (src, length, stopped) in enumerate(jobs):
            payload = {"kind": JobKind.COPY, "queue": int(stopped), "index": i, "cookie": i, "src_addr": src,
                       "length": length, "zero": int(length == 0), "dst_addr": 0, **plan(p, src, length)}
            await stream_put(ctx, dut.job, payload, rng, idle=0.3)

    async def sink(ctx):
        while len(got_jobs) < len(jobs):
            got_jobs.append(await stream_get(ctx, dut.wjob, rng, stall=0.3))
        await ctx.tick().until(dut.idle)  # the last copy's bursts are issued after its job passed

    async def memory(ctx):
        """The AR channel with random readiness; rows and IDs come back in order, some cycles later."""
        ctx.set(dut.stops.draining, 0b10)  # queue 1 is disabled: its copies are dropped
        # Per burst in flight: [rows, cycles until its read ID returns]; then [rows, cycles until the write
        # side is done with its rows]: IDs and rows come back in order, rows often much later (the write
        # side drains the buffer at its own pace), so both the ID and the row limits bind.
        outstanding: list[list[int]] = []
        unwritten: list[list[int]] = []
        row_free = tag_free = 0
        for _ in range(100_000):  # ample for 40 jobs; a stuck engine fails here instead of hanging
            for burst in outstanding + unwritten:
                burst[1] -= 1
            while outstanding and outstanding[0][1] <= 0:
                unwritten.append([outstanding.pop(0)[0], rng.choice([1, rng.randrange(20, 120)])])
                tag_free += 1
            while unwritten and unwritten[0][1] <= 0:
                row_free += unwritten.pop(0)[0]
            # returns first: the engine's AR valid depends on them within the cycle
            ctx.set(dut.row_free, row_free % (1 << p.row_ptr_width))
            ctx.set(dut.tag.free, tag_free % (1 << (p.read_id_width + 1)))
            ready = int(rng.random() < 0.6)
            ctx.set(dut.ar.arready, ready)
            valid, addr, alen = ctx.get(dut.ar.arvalid), ctx.get(dut.ar.araddr), ctx.get(dut.ar.arlen)
            base, beats = ctx.get(dut.tag.base), ctx.get(dut.tag.beats)
            in_use = (ctx.get(dut.row_alloc) - row_free) % (1 << p.row_ptr_width)
            assert in_use <= rows_cap, "more rows handed out than the buffer holds"
            assert (ctx.get(dut.tag.alloc) - tag_free) % (1 << (p.read_id_width + 1)) <= p.reads_outstanding
            if valid and ready:
                assert alen + 1 == beats
                assert in_use + beats <= rows_cap, "a burst issued without room for its beats"
                got_bursts.append((addr, beats, base))
                outstanding.append([beats, rng.randrange(2, 30)])
                most_rows_held[0] = max(most_rows_held[0], in_use + beats)
            await ctx.tick()
        raise AssertionError(f"the read engine stalled: {len(got_jobs)} of {len(jobs)} jobs passed, "
                             f"{len(got_bursts)} bursts issued, {len(outstanding)} in flight; "
                             f"row_alloc {ctx.get(dut.row_alloc)} row_free {row_free} tag_alloc {ctx.get(dut.tag.alloc)} "
                             f"tag_free {tag_free} job_valid {ctx.get(dut.job.valid)} stall {ctx.get(dut.stall_buffer)} "
                             f"idle {ctx.get(dut.idle)} next {jobs[len(got_jobs)]}")

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(source)
    sim.add_testbench(sink)
    sim.add_testbench(memory, background=True)
    sim.run()

    want_bursts, row = [], 0
    for src, length, stopped in jobs:
        nrows = plan(p, src, length)["nrows"]
        if length == 0 or stopped:
            continue
        for addr, beats in model_bursts(p, src, nrows):
            want_bursts.append((addr, beats, row % (1 << p.row_ptr_width)))
            row += beats
    assert got_bursts == want_bursts
    assert most_rows_held[0] > rows_cap - p.max_burst_beats, "the test never filled the buffer"
    assert [int(j.index) for j in got_jobs] == list(range(len(jobs)))
    for j, (src, length, stopped) in zip(got_jobs, jobs):
        want_kind = JobKind.DROP if stopped else JobKind.COPY
        assert j.kind == want_kind, f"job {int(j.index)}"
        reads = length > 0 and not stopped
        assert int(j.nrows) == (plan(p, src, length)["nrows"] if reads else 0)
