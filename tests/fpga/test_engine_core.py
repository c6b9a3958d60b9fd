"""The board's engine core in amaranth.sim, driven only through its serial line as a host would drive the board:
identity over the bridge, a buffer filled in on-chip RAM, a region, a queue, one copy, its completion word."""

from __future__ import annotations

import struct

import pytest
pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth import Module
from amaranth.sim import Simulator

from driver import register_program as rp
from driver.abi import DEVICE_MAGIC, GLOBAL, Flag, Perm, Resp
from driver.descriptor import Descriptor

from fpga.cores.engine_core import RAM_BASE, EngineCore
from tests.fpga.test_engine_estimate import SMALLEST
from tests.fpga.uart_host import UARTHost

RAM_BYTES = 4096
SRC, DST, COMPLETION = 0x104, 0x203, 0x800  # odd destination: the copy needs byte strobes and realignment
PAYLOAD = bytes(range(0x30, 0x30 + 13))
GUARD = 0xA5


async def _ram_write(ctx, host, offset: int, data: bytes) -> None:
    for i in range(0, len(data), 4):
        reply = await host.write(ctx, RAM_BASE + offset + i, int.from_bytes(data[i:i + 4], "little"))
        assert reply.resp == Resp.OKAY


async def _ram_read(ctx, host, offset: int, length: int) -> bytes:
    out = b""
    for i in range(0, length, 4):
        reply = await host.read(ctx, RAM_BASE + offset + i)
        assert reply.resp == Resp.OKAY
        out += struct.pack("<I", reply.data)
    return out


async def _run(ctx, host, steps, polls: int = 20) -> None:
    """Runs a register program over the bridge, each poll bounded."""
    for step in steps:
        if isinstance(step, rp.Write):
            assert (await host.write(ctx, step.addr, step.value)).resp == Resp.OKAY, hex(step.addr)
        else:
            for _ in range(polls):
                if ((await host.read(ctx, step.addr)).data & step.mask) == step.expect:
                    break
            else:
                raise AssertionError(f"timed out waiting for {step.what}")


def test_copy_through_the_serial_line():
    core = EngineCore(SMALLEST, clock_mhz=1.0, baud=250_000, ram_bytes=RAM_BYTES)  # 4 cycles a bit
    m = Module()
    m.submodules.core = core
    host = UARTHost(m, core.divisor, core.rx, core.tx)
    out = {}

    async def test(ctx):
        out["id"] = (await host.read(ctx, GLOBAL.address("ID"))).data
        out["nowhere"] = (await host.read(ctx, 0x4000_0000)).resp
        await _ram_write(ctx, host, SRC, PAYLOAD + bytes(3))
        await _ram_write(ctx, host, DST - 3, bytes([GUARD]) * 20)
        await _ram_write(ctx, host, COMPLETION, bytes(8))
        await _run(ctx, host, rp.start_engine() + rp.set_region(0, 0, RAM_BYTES, Perm.READ | Perm.WRITE)
                   + rp.configure_queue(0, 0, COMPLETION) + rp.enable_queue(0))
        raw = Descriptor(src_region=0, src_offset=SRC, dst_region=0, dst_offset=DST, length=len(PAYLOAD),
                         flags=Flag.NOTIFY, cookie=7).pack()
        for offset, data in rp.window_writes(0, 0, raw, SMALLEST.slots):
            for i in range(0, len(data), 4):
                assert (await host.write(ctx, offset + i, int.from_bytes(data[i:i + 4], "little"))).resp == Resp.OKAY
        await _run(ctx, host, rp.ring(0, 1))
        for _ in range(10):
            out["completion"] = int.from_bytes(await _ram_read(ctx, host, COMPLETION, 8), "little")
            if out["completion"]:
                break
        out["dst"] = await _ram_read(ctx, host, DST - 3, 20)

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(test)
    sim.run()
    assert out["id"] == DEVICE_MAGIC and out["nowhere"] == Resp.DECERR
    assert out["completion"] == 1  # one descriptor completed, no error bit
    assert out["dst"] == bytes([GUARD]) * 3 + PAYLOAD + bytes([GUARD]) * 4
