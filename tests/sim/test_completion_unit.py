"""The completion unit on its own (amaranth.sim), against a model of retirement: entries come in issue order,
each burst waits for its response; a descriptor's marker retires it as dropped (RETIRE), failed (HALT, with
its code or BUS_ERROR for any error response of its bursts), retired behind a halted queue, or completed
(counted), under random idle on both inputs."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth.sim import Simulator  # noqa: E402

from driver.abi import ErrorCode, Resp  # noqa: E402
from rtl.completion import CompletionUnit  # noqa: E402
from rtl.records import DoneKind  # noqa: E402

pytestmark = pytest.mark.sim
NUM_QUEUES = 4


def draw(rng: random.Random, n: int):
    """Descriptors as the write planner emits them: (entries, responses of their bursts)."""
    out = []
    for i in range(n):
        queue = rng.randrange(NUM_QUEUES)
        shape = rng.choice(["copy", "copy", "copy", "imm", "zero", "code", "dropped", "bus_error"])
        length = 0 if shape in ("zero", "code", "dropped") else rng.randrange(1, 5000)
        bursts = {"copy": rng.randrange(1, 5), "imm": 1, "bus_error": rng.randrange(1, 4)}.get(shape, 0)
        code = int(rng.choice([ErrorCode.UNKNOWN_REGION, ErrorCode.OUT_OF_BOUNDS])) if shape == "code" else 0
        common = {"queue": queue, "index": i, "cookie": rng.getrandbits(32), "notify": rng.randrange(2),
                  "length": length, "dropped": int(shape == "dropped")}
        entries, resps = [], []
        for k in range(bursts):
            entries.append({**common, "burst": 1, "marker": int(k == bursts - 1), "code": 0})
            bad = shape == "bus_error" and rng.random() < 0.6
            resps.append(int(Resp.SLVERR if bad else Resp.OKAY))
        if shape == "bus_error" and all(r == Resp.OKAY for r in resps):
            resps[rng.randrange(bursts)] = int(Resp.DECERR)
        if not bursts:
            entries.append({**common, "burst": 0, "marker": 1, "code": code})
        out.append((entries, resps))
    return out


def model(descriptors):
    """The done events and the counters, as the completion unit must produce them."""
    halted, done, count, nbytes = set(), [], 0, 0
    for entries, resps in descriptors:
        e = entries[-1]
        failed = any(r != Resp.OKAY for r in resps)
        if e["dropped"]:
            kind = DoneKind.RETIRE
        elif e["code"] or failed:
            kind = DoneKind.HALT
        elif e["queue"] in halted:
            kind = DoneKind.RETIRE
        else:
            kind = DoneKind.SUCCESS
            count, nbytes = count + 1, nbytes + e["length"]
        if kind == DoneKind.HALT:
            halted.add(e["queue"])
        code = e["code"] or int(ErrorCode.BUS_ERROR)
        done.append((kind, e["queue"], e["index"], e["cookie"], e["notify"], code if kind == DoneKind.HALT else None))
    return done, count, nbytes


@pytest.mark.parametrize("seed", range(3))
def test_retirement_matches_the_model(seed):
    rng = random.Random(seed)
    descriptors = draw(rng, 120)
    want, want_count, want_bytes = model(descriptors)
    entries = [e for d, _ in descriptors for e in d]
    resps = [r for _, rs in descriptors for r in rs]
    dut = CompletionUnit(num_queues=NUM_QUEUES)
    got = []

    async def bench(ctx):
        halted = 0
        ei = ri = 0
        for _ in range(20_000):
            if len(got) == len(want):
                break
            ctx.set(dut.halted, halted)  # the queue table's halted bits: set the cycle after a HALT
            offer_e = ei < len(entries) and rng.random() < 0.7
            ctx.set(dut.cent.valid, offer_e)
            if offer_e:
                ctx.set(dut.cent.payload, entries[ei])
            offer_b = ri < len(resps) and rng.random() < 0.6
            ctx.set(dut.b.valid, offer_b)
            if offer_b:
                ctx.set(dut.b.payload, resps[ri])
            if ctx.get(dut.done.valid):
                d = ctx.get(dut.done.entry)
                kind = DoneKind(d.kind)
                got.append((kind, int(d.queue), int(d.index), int(d.cookie), int(d.notify),
                            int(d.code) if kind == DoneKind.HALT else None))
                if kind == DoneKind.HALT:
                    halted |= 1 << int(d.queue)
            if offer_e and ctx.get(dut.cent.ready):
                ei += 1
            if offer_b and ctx.get(dut.b.ready):
                ri += 1
            await ctx.tick()
        assert ei == len(entries) and ri == len(resps), "the unit stopped taking entries or responses"
        ctx.set(dut.cent.valid, 0)
        ctx.set(dut.b.valid, 0)
        assert ctx.get(dut.idle)
        assert (ctx.get(dut.descriptors), ctx.get(dut.bytes)) == (want_count, want_bytes)

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
    assert got == want
