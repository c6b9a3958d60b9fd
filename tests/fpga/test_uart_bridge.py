# amaranth: UnusedElaboratable=no
"""The UART register bridge in amaranth.sim, against a Python model of a register space."""

from __future__ import annotations

import random

import pytest
pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth import Module
from amaranth.sim import Simulator

from driver.abi import Resp
from fpga.link.bridge_protocol import BridgeError, Reply, parse_reply, read_frame, write_frame
from fpga.cores.uart_bridge import UARTBridge
from tests.fpga.uart_host import UARTHost

DIV = 8
TIMEOUT = 40 * DIV


def _bench(test, space: dict[int, int], max_wait: int = 5):
    """Runs `test(ctx, host)` against a bridge whose bus answers from `space` after 0..max_wait cycles;
    addresses >= 0x8000_0000 answer DECERR."""
    m = Module()
    m.submodules.bridge = bridge = UARTBridge(DIV, TIMEOUT)
    host = UARTHost(m, DIV, bridge.rx, bridge.tx)
    sim = Simulator(m)
    sim.add_clock(1e-6)
    rng = random.Random(1)
    accesses = []

    async def bus(ctx):
        bus = bridge.bus
        while True:
            await ctx.tick()  # not .until(): a background testbench left waiting in it warns at the end
            if not ctx.get(bus.valid):
                continue
            if wait := rng.randint(0, max_wait):
                await ctx.tick().repeat(wait)
            addr, write, wdata = ctx.get(bus.addr), ctx.get(bus.write), ctx.get(bus.wdata)
            accesses.append((addr, write))
            if addr >= 0x8000_0000:
                ctx.set(bus.resp, Resp.DECERR)
            elif write:
                space[addr] = wdata
                ctx.set(bus.resp, Resp.OKAY)
            else:
                ctx.set(bus.rdata, space.get(addr, 0))
                ctx.set(bus.resp, Resp.OKAY)
            ctx.set(bus.ready, 1)
            await ctx.tick()
            ctx.set(bus.ready, 0)

    async def run(ctx):
        await test(ctx, host)

    sim.add_testbench(bus, background=True)
    sim.add_testbench(run)
    sim.run()
    return accesses


def test_writes_then_reads_back():
    space = {}
    words = {addr: random.Random(addr).getrandbits(32) for addr in (0, 4, 0x1234_5678, 0x7FFF_FFFC)}
    results = {}

    async def test(ctx, host):
        for addr, value in words.items():
            assert await host.write(ctx, addr, value) == Reply(Resp.OKAY)
        for addr in words:
            results[addr] = await host.read(ctx, addr)

    accesses = _bench(test, space)
    assert space == words
    assert {a: r.data for a, r in results.items()} == words
    assert all(r.resp == Resp.OKAY for r in results.values())
    assert accesses == [(a, 1) for a in words] + [(a, 0) for a in words]  # one bus access per frame


def test_bus_error_is_answered():
    out = []

    async def test(ctx, host):
        out.append(await host.write(ctx, 0x8000_0000, 1))
        out.append(await host.read(ctx, 0x9000_0000))

    _bench(test, {})
    assert [r.resp for r in out] == [Resp.DECERR, Resp.DECERR]


def test_unknown_opcode_and_stalled_frame_resynchronize():
    out = []

    async def test(ctx, host):
        await host.send(ctx, b"x")
        out.append(await host.receive(ctx, 1))
        await host.send(ctx, write_frame(0x10, 0xDEAD_BEEF)[:5])  # a frame cut short ...
        await ctx.tick().repeat(TIMEOUT + 20 * DIV)  # ... is dropped after the frame timeout
        out.append(await host.receive(ctx, 1, max_bytes_time=2))
        out.append(await host.read(ctx, 0x10))

    accesses = _bench(test, {0x10: 7})
    assert out[0] == b"?" and out[1] == b""
    assert out[2] == Reply(Resp.OKAY, 7) and accesses == [(0x10, 0)]


def test_host_protocol_checks():
    with pytest.raises(ValueError, match="32 bits"):
        read_frame(1 << 32)
    with pytest.raises(BridgeError, match="answered 2 bytes"):
        parse_reply(b"\x00\x01", read=False)
    with pytest.raises(BridgeError, match="out of step"):
        parse_reply(b"?1234", read=True)
    with pytest.raises(ValueError, match="frame_timeout"):
        UARTBridge(100, 10)
