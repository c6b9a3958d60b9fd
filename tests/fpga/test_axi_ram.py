"""AxiRam and BusToAxi in amaranth.sim, against a bytearray model: bursts, strobes, stalls, errors, timeouts."""

from __future__ import annotations

import random

import pytest
pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth import Module
from amaranth.sim import Simulator

from driver.abi import Resp
from fpga.cores.axi_ram import AxiRam
from rtl.register_bus import BusToAxi


DW = 64
SIZE = 4096


async def _axi_write(ctx, a, rng, addr: int, beats: list[int], strobes: list[int]) -> int:
    ctx.set(a.awaddr, addr)
    ctx.set(a.awlen, len(beats) - 1)
    ctx.set(a.awsize, 3)
    ctx.set(a.awid, 5)
    ctx.set(a.awvalid, 1)
    await ctx.tick().until(a.awready)
    ctx.set(a.awvalid, 0)
    for i, (data, strb) in enumerate(zip(beats, strobes)):
        if rng.random() < 0.3:
            await ctx.tick().repeat(rng.randint(1, 3))
        ctx.set(a.wdata, data)
        ctx.set(a.wstrb, strb)
        ctx.set(a.wlast, i == len(beats) - 1)
        ctx.set(a.wvalid, 1)
        await ctx.tick().until(a.wready)
        ctx.set(a.wvalid, 0)
    ctx.set(a.bready, 1)
    resp, bid = await ctx.tick().sample(a.bresp, a.bid).until(a.bvalid)
    ctx.set(a.bready, 0)
    assert bid == 5
    return resp


async def _axi_read(ctx, a, rng, addr: int, count: int) -> tuple[list[int], list[int]]:
    ctx.set(a.araddr, addr)
    ctx.set(a.arlen, count - 1)
    ctx.set(a.arsize, 3)
    ctx.set(a.arid, 9)
    ctx.set(a.arvalid, 1)
    await ctx.tick().until(a.arready)
    ctx.set(a.arvalid, 0)
    data, resps = [], []
    while len(data) < count:
        ready = rng.random() < 0.7
        ctx.set(a.rready, ready)
        _, _, valid, rdata, rresp, rlast, rid = await ctx.tick().sample(a.rvalid, a.rdata, a.rresp, a.rlast, a.rid)
        if ready and valid:
            data.append(rdata)
            resps.append(rresp)
            assert rid == 9 and rlast == (len(data) == count)
    ctx.set(a.rready, 0)
    return data, resps


async def _side(ctx, side, addr: int, write: bool, wdata: int = 0) -> tuple[int, int]:
    ctx.set(side.addr, addr)
    ctx.set(side.write, write)
    ctx.set(side.wdata, wdata)
    ctx.set(side.valid, 1)
    rdata, resp = await ctx.tick().sample(side.rdata, side.resp).until(side.ready)
    ctx.set(side.valid, 0)
    return rdata, resp


def _ram_bench(test):
    m = Module()
    m.submodules.ram = ram = AxiRam(SIZE, DW, addr_width=32, id_width=4)
    sim = Simulator(m)
    sim.add_clock(1e-8)

    async def bench(ctx):
        await test(ctx, ram)

    sim.add_testbench(bench)
    sim.run()


def _words(model: bytearray, addr: int, count: int) -> list[int]:
    return [int.from_bytes(model[addr + 8 * i: addr + 8 * i + 8], "little") for i in range(count)]


def test_bursts_with_strobes_and_stalls_match_the_model():
    rng = random.Random(11)
    model = bytearray(SIZE)
    checks = []

    async def test(ctx, ram):
        for _ in range(40):
            beats = rng.randint(1, 16)
            addr = 8 * rng.randrange(SIZE // 8 - beats)
            data = [rng.getrandbits(DW) for _ in range(beats)]
            strobes = [rng.choice([0xFF, 0x0F, 0xF0, rng.getrandbits(8)]) for _ in range(beats)]
            assert await _axi_write(ctx, ram.axi, rng, addr, data, strobes) == Resp.OKAY
            for i, (word, strb) in enumerate(zip(data, strobes)):
                for b in range(8):
                    if strb >> b & 1:
                        model[addr + 8 * i + b] = word >> (8 * b) & 0xFF
            raddr = 8 * rng.randrange(SIZE // 8 - 16)
            got, resps = await _axi_read(ctx, ram.axi, rng, raddr, rng.randint(1, 16))
            checks.append((got, _words(model, raddr, len(got)), resps))
            # the side port sees the same memory, 32 bits at a time
            saddr = 4 * rng.randrange(SIZE // 4)
            word, resp = await _side(ctx, ram.side, saddr, False)
            checks.append(([word], [int.from_bytes(model[saddr:saddr + 4], "little")], [resp]))
            value = rng.getrandbits(32)
            await _side(ctx, ram.side, saddr, True, value)
            model[saddr:saddr + 4] = value.to_bytes(4, "little")

    _ram_bench(test)
    assert len(checks) == 80
    for got, want, resps in checks:
        assert got == want and set(resps) == {Resp.OKAY}


def test_accesses_beyond_the_ram_answer_decerr_and_change_nothing():
    rng = random.Random(2)
    out = {}

    async def test(ctx, ram):
        await _side(ctx, ram.side, SIZE - 4, True, 0x1234_5678)
        # a burst whose last two beats fall beyond the end
        out["w"] = await _axi_write(ctx, ram.axi, rng, SIZE - 16, [1, 2, 3, 4], [0xFF] * 4)
        out["r"] = await _axi_read(ctx, ram.axi, rng, SIZE - 16, 4)
        out["side"] = await _side(ctx, ram.side, SIZE, False)
        out["side_w"] = await _side(ctx, ram.side, SIZE + 8, True, 7)
        out["wrapped"] = await _side(ctx, ram.side, 8, False)  # a write beyond must not wrap around

    _ram_bench(test)
    assert out["w"] == Resp.DECERR
    data, resps = out["r"]
    assert data == [1, 2, 0, 0] and resps == [Resp.OKAY, Resp.OKAY, Resp.DECERR, Resp.DECERR]
    assert out["side"][1] == Resp.DECERR and out["side_w"][1] == Resp.DECERR
    assert out["wrapped"] == (0, Resp.OKAY)


@pytest.mark.parametrize("id_width", [None, 4])
def test_bus_to_axi_lanes_through_the_ram(id_width):
    m = Module()
    m.submodules.ram = ram = AxiRam(SIZE, DW, addr_width=32, id_width=4)
    m.submodules.bridge = br = BusToAxi(32, DW, 4, timeout=50)
    from amaranth.lib import wiring

    wiring.connect(m, br.axi, ram.axi)
    out = []

    async def test(ctx):
        for addr in (0, 4, 8, 12):
            await _side(ctx, br.bus, addr, True, 0xA0 + addr)
        for addr in (0, 4, 8, 12):
            out.append(await _side(ctx, br.bus, addr, False))
        out.append(await _side(ctx, ram.side, 4, False))  # lane 1 of word 0, seen from the side
        out.append(await _side(ctx, br.bus, SIZE, False))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(test)
    sim.run()
    assert out[:5] == [(0xA0 + a, Resp.OKAY) for a in (0, 4, 8, 12)] + [(0xA4, Resp.OKAY)]
    assert out[5][1] == Resp.DECERR


def test_bus_to_axi_times_out_on_a_dead_slave():
    m = Module()
    m.submodules.bridge = br = BusToAxi(16, 32, None, timeout=20)
    out = []

    async def test(ctx):
        out.append(await _side(ctx, br.bus, 0x10, True, 1))
        out.append(await _side(ctx, br.bus, 0x10, False))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(test)
    sim.deadline = 1e-8 * 200
    sim.run_until(sim.deadline)
    assert out == [(0, Resp.DECERR), (0, Resp.DECERR)]
