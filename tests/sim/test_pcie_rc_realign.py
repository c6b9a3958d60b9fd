"""RcRealign (rtl/pcie_rc_realign.py) in amaranth.sim against a model of the block's straddled RC stream (as
cocotbext-pcie's RcSource packs it with two segments: a completion starts at lane 0, or at lane 8 after one that
ended in lanes 0-7 when the next is already waiting): completions of 64-byte multiples back to back (each beat
after a completion's first gives one output beat, a beat a cycle when nothing stalls), and every other shape (a
descriptor alone, 1 to 45 DWORDs of data, two completions ending in one beat), with idle input and a stalling
output; every output beat's data, lanes, descriptor and ends against the completions sent."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth.sim import Simulator  # noqa: E402

from rtl.pcie_rc_realign import RcRealign  # noqa: E402
from tests.sim.rc_straddle_model import straddled  # noqa: E402

pytestmark = pytest.mark.sim


def expected(frames: list[list[int]]) -> list[tuple[int, int, bool, int, bool]]:
    """(data, kept lanes, sop, descriptor, last) of each output beat."""
    out = []
    for f in frames:
        header, body = f[:3], f[3:]
        pieces = [body[i:i + 16] for i in range(0, len(body), 16)] or [[]]
        hdr = sum(w << 32 * i for i, w in enumerate(header))
        for j, piece in enumerate(pieces):
            out.append((sum(w << 32 * i for i, w in enumerate(piece)), len(piece), j == 0, hdr if j == 0 else None,
                        j == len(pieces) - 1))
    return out


def run(frames, seed: int, idle: float = 0.0, stall: float = 0.0, waiting: float = 1.0):
    rng = random.Random(seed)
    beats = straddled(frames, rng, waiting)
    dut = RcRealign()
    got, state = [], {"first_in": None, "last_out": None, "cycle": 0}

    async def source(ctx):
        rc = dut.rc
        for data, keep, user in beats:
            while rng.random() < idle:
                ctx.set(rc.tvalid, 0)
                await ctx.tick()
            ctx.set(rc.tdata, data)
            ctx.set(rc.tkeep, keep)
            ctx.set(rc.tuser, user)
            ctx.set(rc.tvalid, 1)
            await ctx.tick().until(rc.tready)
            if state["first_in"] is None:
                state["first_in"] = state["cycle"]
        ctx.set(rc.tvalid, 0)

    async def sink(ctx):
        out = dut.out
        ctx.set(out.tready, 1)
        async for _, _, valid, ready, data, keep, sop, hdr, last in ctx.tick().sample(
                out.tvalid, out.tready, out.tdata, out.tkeep, out.sop, out.hdr, out.tlast):
            state["cycle"] += 1
            if valid and ready:
                n = bin(keep).count("1")
                assert keep == (1 << n) - 1, f"lanes {keep:#x} not from lane 0"
                got.append((data & ((1 << 32 * n) - 1), n, bool(sop), hdr if sop else None, bool(last)))
                state["last_out"] = state["cycle"]
            ctx.set(out.tready, rng.random() >= stall)

    async def bench(ctx):
        await ctx.tick().repeat(len(beats) * 8 + 50)

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(source, background=True)
    sim.add_testbench(sink, background=True)
    sim.add_testbench(bench)
    sim.run()
    want = expected(frames)
    assert len(got) == len(want), f"{len(got)} output beats, {len(want)} expected"
    for k, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"output beat {k}: {g[1:]} against {w[1:]}"
    return beats, state


def frame(rng: random.Random, data: int) -> list[int]:
    return [rng.getrandbits(32) for _ in range(3 + data)]


def test_64_byte_multiples_back_to_back_take_a_beat_a_cycle():
    """128-byte completions, each straddling into the next's beat: 2.5 input beats each, one output beat for every
    input beat after a completion's first, with nothing held."""
    rng = random.Random(1)
    frames = [frame(rng, 32) for _ in range(40)]
    beats, state = run(frames, seed=1)
    assert len(beats) == 40 * 5 // 2  # 2 completions every 5 beats
    span = state["last_out"] - state["first_in"]
    assert span <= len(beats) + 2, f"{len(beats)} input beats took {span} cycles"


@pytest.mark.parametrize("seed", [2, 3, 4, 5])
def test_every_shape_with_idle_and_stalls(seed):
    rng = random.Random(seed)
    sizes = [0, 1, 2, 5, 6, 13, 14, 16, 17, 21, 29, 32, 45, 48, 64]
    frames = [frame(rng, rng.choice(sizes + [16, 32, 16, 32])) for _ in range(120)]
    run(frames, seed=seed, idle=0.2, stall=0.3, waiting=0.7)


def test_descriptors_alone_two_in_a_beat():
    """Error completions (a descriptor, no data) back to back: two start and end in one beat."""
    rng = random.Random(6)
    run([frame(rng, 0) for _ in range(9)] + [frame(rng, 5), frame(rng, 5), frame(rng, 32)], seed=6)
