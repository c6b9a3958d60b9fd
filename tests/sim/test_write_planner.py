"""The write planner on its own (amaranth.sim), against a model of the destination bursts: every copy is
written in bursts cut at 4 KiB and max_burst_beats, each issued only once the buffer rows its beats need are
filled, with one write-data entry and one completion entry per burst; IMM, error, zero-length and dropped
jobs retire with the entries the completion unit and the write-data generator expect; a read error in the
rows a burst needs fails its descriptor with BUS_ERROR and stops its queue."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth.sim import Simulator  # noqa: E402

from driver.abi import ErrorCode  # noqa: E402
from rtl.params import EngineParams  # noqa: E402
from rtl.records import JobKind, WKind  # noqa: E402
from rtl.write_planner import WritePlanner  # noqa: E402

pytestmark = pytest.mark.sim
PAGE = 4096


def params(data_width: int, write_burst_bytes: int = 0) -> EngineParams:
    return EngineParams(data_width=data_width, num_queues=2, slots=16, num_regions=8, reads_outstanding=4,
                        writes_outstanding=8, buffer_bytes=4096, max_burst_beats=8, write_burst_bytes=write_burst_bytes)


def dst_bursts(p: EngineParams, dst: int, length: int, max_payload: int = 0) -> list[tuple[int, int]]:
    """(address, beats) of every write burst of a copy: cut at 4 KiB boundaries and every max_burst_beats from its
    start, or with write_burst_bytes every that many bytes from its start, raised to the host's max payload size
    (`max_payload`, a PCIe code) up to the longest power-of-two burst."""
    db = p.data_bytes
    top = 1 << (min(p.max_burst_beats, PAGE // db).bit_length() - 1)
    longest = min(max(p.write_burst_bytes, 128 << max_payload), top * db) // db if p.write_burst_bytes \
        else p.max_burst_beats
    addr, left, out = dst & ~(db - 1), (dst % db + length + db - 1) // db, []
    while left:
        beats = min(left, (PAGE - addr % PAGE) // db, longest)
        out.append((addr, beats))
        addr, left = addr + beats * db, left - beats
    return out


def rows_needed(p: EngineParams, src: int, dst: int, length: int, upto: int) -> int:
    """Buffer rows (from the copy's first) that hold the source of the destination bytes before `upto`."""
    db = p.data_bytes
    last = min(upto, dst + length) - 1  # last destination byte the burst writes
    return (src % db + (last - dst)) // db + 1


class Jobs:
    """Random jobs as the read engine passes them on: rows allocated in order."""

    def __init__(self, p: EngineParams, rng: random.Random, n: int):
        db, self.list, row = p.data_bytes, [], 0
        for i in range(n):
            kind = rng.choice([JobKind.COPY] * 5 + [JobKind.IMM, JobKind.ERROR, JobKind.DROP])
            src = rng.randrange(1 << 20)
            dst = rng.choice([rng.randrange(1 << 20), PAGE - rng.randrange(1, 3 * db)])
            length = rng.choice([0, 1, rng.randrange(1, 200), rng.randrange(1, 2500)]) if kind != JobKind.IMM else 8
            if kind == JobKind.IMM:
                dst &= ~7
            zero = int(kind == JobKind.COPY and length == 0)
            reads = kind == JobKind.COPY and length > 0 or (kind == JobKind.DROP and length > 0 and rng.random() < 0.5)
            nrows = (src % db + length + db - 1) // db if reads else 0
            self.list.append({"kind": kind, "queue": rng.randrange(p.num_queues), "index": i,
                              "cookie": rng.getrandbits(32), "code": int(ErrorCode.PERMISSION) if kind == JobKind.ERROR else 0,
                              "notify": rng.randrange(2), "zero": zero, "src_addr": src, "dst_addr": dst,
                              "length": length, "row0": row, "nrows": nrows, "rbeats": 0, "rlast": 0})
            row += nrows
        self.rows = row


def expected(p: EngineParams, jobs: list[dict], max_payload: int = 0):
    """AW bursts (address, len, rows the burst needs), write entries (kind, beats, row0, nrows) and completion
    entries (burst, marker, dropped, index, code) in issue order."""
    aw, went, cent = [], [], []
    for j in jobs:
        k = j["kind"]
        if k == JobKind.COPY and not j["zero"]:
            bl = dst_bursts(p, j["dst_addr"], j["length"], max_payload)
            for n, (addr, beats) in enumerate(bl):
                need = rows_needed(p, j["src_addr"], j["dst_addr"], j["length"], addr + beats * p.data_bytes)
                aw.append((addr, beats - 1, j["row0"] + need))
                went.append((WKind.BURST, beats, j["row0"], j["nrows"]))
                cent.append((1, int(n == len(bl) - 1), 0, j["index"], 0))
        elif k == JobKind.IMM:
            aw.append((j["dst_addr"] & ~(p.data_bytes - 1), 0, 0))
            went.append((WKind.IMM, 1, j["row0"], 0))
            cent.append((1, 1, 0, j["index"], 0))
        elif k == JobKind.DROP:
            if j["nrows"]:
                went.append((WKind.DISCARD, None, j["row0"], j["nrows"]))
            cent.append((0, 1, 1, j["index"], 0))
        else:  # ERROR, or a zero-length copy
            cent.append((0, 1, 0, j["index"], j["code"]))
    return aw, went, cent


@pytest.mark.parametrize("rows_in_cycle", [False, True])
@pytest.mark.parametrize(("data_width", "seed", "write_burst_bytes", "max_payload"),
                         [(64, 1, 0, 0), (64, 2, 0, 0), (512, 3, 0, 0), (512, 4, 0, 0), (64, 5, 32, 0), (64, 6, 8, 0),
                          (512, 7, 256, 0), (512, 8, 64, 0), (512, 9, 128, 1), (512, 10, 128, 3), (512, 11, 128, 0),
                          (64, 12, 32, 1)])
def test_bursts_wait_for_their_rows_and_match_the_model(data_width, seed, write_burst_bytes, max_payload,
                                                        rows_in_cycle):
    """max_payload: the host's size (128 << code bytes), which raises the span write bursts end at. rows_in_cycle:
    the burst decided in the cycle its rows are counted (the card), or from the registered compare, with the spare
    register before stage A and a cycle between jobs (the board)."""
    p = params(data_width, write_burst_bytes)
    rng = random.Random(seed)
    jobs = Jobs(p, rng, 60)
    want_aw, want_went, want_cent = expected(p, jobs.list, max_payload)
    dut = WritePlanner(num_queues=p.num_queues, data_width=p.data_width, row_ptr_width=p.row_ptr_width,
                       max_burst_beats=p.max_burst_beats, write_burst_bytes=p.write_burst_bytes,
                       rows_in_cycle=rows_in_cycle, skid=not rows_in_cycle, load_gap=not rows_in_cycle)
    got_aw, got_went, got_cent = [], [], []

    async def bench(ctx):
        ctx.set(dut.max_payload, max_payload)
        ji = 0
        filled = 0  # rows the read side has filled: grows at random, never past what was handed out
        for _ in range(60_000):
            if len(got_cent) == len(want_cent):
                break
            allocated = jobs.list[ji - 1]["row0"] + jobs.list[ji - 1]["nrows"] if ji else 0
            if filled < allocated and rng.random() < 0.3:
                filled = min(allocated, filled + rng.randrange(1, 4))
            ctx.set(dut.filled, filled)
            ctx.set(dut.row_alloc, allocated)
            offer = ji < len(jobs.list) and rng.random() < 0.5
            ctx.set(dut.wjob.valid, offer)
            if offer:
                ctx.set(dut.wjob.payload, jobs.list[ji])
            aw_ready = rng.random() < 0.6
            ctx.set(dut.aw.ready, aw_ready)
            ctx.set(dut.went.ready, rng.random() < 0.7)
            ctx.set(dut.cent.ready, rng.random() < 0.7)
            if ctx.get(dut.aw.valid) and aw_ready:
                got_aw.append((ctx.get(dut.aw.payload.addr), ctx.get(dut.aw.payload.len), filled))
            if ctx.get(dut.went.valid) and ctx.get(dut.went.ready):
                w = ctx.get(dut.went.payload)
                kind = WKind(w.kind)
                got_went.append((kind, None if kind == WKind.DISCARD else int(w.beats), int(w.row0),
                                 0 if kind == WKind.IMM else int(w.nrows)))
            if ctx.get(dut.cent.valid) and ctx.get(dut.cent.ready):
                c = ctx.get(dut.cent.payload)
                got_cent.append((int(c.burst), int(c.marker), int(c.dropped), int(c.index), int(c.code)))
            assert not ctx.get(dut.stop.valid), "the planner stopped a queue with no read error"
            if offer and ctx.get(dut.wjob.ready):
                ji += 1
            await ctx.tick()
        ctx.set(dut.wjob.valid, 0)
        for _ in range(4):  # the last address leaves its register
            ctx.set(dut.aw.ready, 1)
            if ctx.get(dut.aw.valid):
                got_aw.append((ctx.get(dut.aw.payload.addr), ctx.get(dut.aw.payload.len), filled))
            await ctx.tick()
        assert ctx.get(dut.idle), "the planner did not drain"

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
    assert got_cent == want_cent
    assert got_went == want_went
    assert [(a, n) for a, n, _ in got_aw] == [(a, n) for a, n, _ in want_aw]
    for (addr, _, filled), (_, _, need) in zip(got_aw, want_aw):
        # the address is registered: it leaves a cycle after the burst was decided, with rows no fewer
        assert filled >= need, f"the burst at {addr:#x} went out before the {need} rows it needs were filled"


@pytest.mark.parametrize("seed", range(3))
def test_a_read_error_fails_the_descriptor_and_stops_its_queue(seed):
    """Queue 0's copy meets a failed read burst at row `fault`: bursts whose rows lie before it may go out
    (the ABI allows a partial destination), then the descriptor retires with BUS_ERROR, its queue stops,
    and the queue's next job is dropped; queue 1's copy runs whole."""
    p = params(64)
    rng = random.Random(seed)
    db = p.data_bytes
    a = {"kind": JobKind.COPY, "queue": 0, "index": 0, "cookie": 1, "code": 0, "notify": 0, "zero": 0,
         "src_addr": 0x10000 + rng.randrange(db), "dst_addr": 0x40000 + rng.randrange(db), "length": 40 * db,
         "row0": 0, "rbeats": 0, "rlast": 0}
    a["nrows"] = (a["src_addr"] % db + a["length"] + db - 1) // db
    b = {**a, "index": 1, "cookie": 2, "row0": a["nrows"], "dst_addr": 0x50000}
    c = {**a, "queue": 1, "index": 2, "cookie": 3, "row0": 2 * a["nrows"], "dst_addr": 0x60000}
    jobs = [a, b, c]
    fault_row = rng.choice([0, 8, 16, 24])  # the first row of the failed read burst
    dut = WritePlanner(num_queues=p.num_queues, data_width=p.data_width, row_ptr_width=p.row_ptr_width,
                       max_burst_beats=p.max_burst_beats)
    got_aw, got_cent, got_went, stops = [], [], [], []

    async def bench(ctx):
        ji, filled, faulted, acked = 0, 0, False, False
        shown_in = 0
        for _ in range(5_000):
            if len(got_cent) and got_cent[-1][3] == 2 and got_cent[-1][1]:
                break
            allocated = jobs[ji - 1]["row0"] + jobs[ji - 1]["nrows"] if ji else 0
            limit = fault_row if not acked else allocated
            if filled < min(limit, allocated) and rng.random() < 0.5:
                filled += 1
            if filled == fault_row and not acked and ji:
                faulted = True
            ctx.set(dut.fault.valid, faulted and not acked)
            ctx.set(dut.fault.row, fault_row)
            if faulted and not acked and ctx.get(dut.fault.ack):
                # the read side ran ahead: every later row is in, so the next job could start at once
                acked, filled = True, sum(j["nrows"] for j in jobs)
            ctx.set(dut.filled, filled)
            ctx.set(dut.row_alloc, allocated)
            offer = ji < len(jobs)
            ctx.set(dut.wjob.valid, offer)
            if offer:
                ctx.set(dut.wjob.payload, jobs[ji])
            for port in (dut.aw, dut.went, dut.cent):
                ctx.set(port.ready, 1)
            if ctx.get(dut.aw.valid):
                got_aw.append((ctx.get(dut.aw.payload.addr), filled))
            if ctx.get(dut.went.valid):
                got_went.append(WKind(ctx.get(dut.went.payload.kind)))
            if ctx.get(dut.cent.valid):
                e = ctx.get(dut.cent.payload)
                got_cent.append((int(e.burst), int(e.marker), int(e.dropped), int(e.index), int(e.code)))
            if ctx.get(dut.stop.valid):
                stops.append((ctx.get(dut.stop.queue), ctx.get(dut.stop.index)))
                shown_in = 2
            if offer and ctx.get(dut.wjob.ready):
                ji += 1
            await ctx.tick()
            if stops:  # the queue table registers the stop, and its `stops` show it the cycle after
                shown_in -= 1
                if shown_in == 0:
                    ctx.set(dut.stops.halting, 0b01)
                    ctx.set(dut.stops.stop_at[0], 0)

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
    assert stops == [(0, 0)]
    a_cent = [e for e in got_cent if e[3] == 0]
    assert a_cent[-1] == (0, 1, 0, 0, int(ErrorCode.BUS_ERROR)), "the copy did not fail with BUS_ERROR"
    a_bursts = dst_bursts(p, a["dst_addr"], a["length"])
    sent = len(a_cent) - 1
    assert all(e[:2] == (1, 0) for e in a_cent[:-1]) and sent <= len(a_bursts)
    for addr, beats in a_bursts[:sent]:
        need = rows_needed(p, a["src_addr"], a["dst_addr"], a["length"], addr + beats * db)
        assert need <= fault_row, f"a burst needing row {need - 1} went out past the failed row {fault_row}"
    assert [e for e in got_cent if e[3] == 1] == [(0, 1, 1, 1, 0)], "the stopped queue's next job was not dropped"
    c_cent = [e for e in got_cent if e[3] == 2]
    assert len(c_cent) == len(dst_bursts(p, c["dst_addr"], c["length"])) and c_cent[-1] == (1, 1, 0, 2, 0)
    assert got_went.count(WKind.DISCARD) == 2  # the failed copy's rows and the dropped job's


@pytest.mark.parametrize("bad", [96, 4, 1024, 8192])
def test_write_burst_bytes_is_checked(bad):
    """A power of two from a beat (8 bytes at 64 bits) to max_burst_beats beats (512 bytes here); 0 keeps the cut
    of reads."""
    with pytest.raises(ValueError, match="write_burst_bytes"):
        EngineParams(data_width=64, max_burst_beats=64, write_burst_bytes=bad)
    with pytest.raises(ValueError, match="write_burst_bytes"):
        WritePlanner(num_queues=2, data_width=64, row_ptr_width=20, max_burst_beats=64, write_burst_bytes=bad)
    assert EngineParams(data_width=64, max_burst_beats=64, write_burst_bytes=256).write_burst_beats == 32
    assert EngineParams(data_width=64, max_burst_beats=64).write_burst_beats == 64
