"""The scratch bring-up core in amaranth.sim through the serial line: ID, read/write, LEDs, errors."""

from __future__ import annotations

import pytest
pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth import Module
from amaranth.sim import Simulator

from driver.abi import Resp
from fpga.link.bridge_protocol import Reply
from fpga.cores.scratch_core import ID_WORD, ScratchCore
from tests.fpga.uart_host import UARTHost


def test_scratch_core_over_uart():
    core = ScratchCore(clock_mhz=1.0, baud=125_000, registers=3)  # 8 cycles a bit
    m = Module()
    m.submodules.core = core
    host = UARTHost(m, core.divisor, core.rx, core.tx)
    sim = Simulator(m)
    sim.add_clock(1e-6)
    out = {}

    async def test(ctx):
        out["id"] = await host.read(ctx, 0)
        out["id_write"] = await host.write(ctx, 0, 5)
        out["w"] = [await host.write(ctx, 4 * i, 0x1000 + i) for i in (1, 2, 3)]
        out["r"] = [await host.read(ctx, 4 * i) for i in (1, 2, 3)]
        out["leds"] = ctx.get(core.status)
        out["beyond"] = await host.read(ctx, 16)
        out["unaligned"] = await host.write(ctx, 6, 1)

    sim.add_testbench(test)
    sim.run()
    assert out["id"] == Reply(Resp.OKAY, ID_WORD)
    assert out["id_write"].resp == Resp.SLVERR
    assert out["w"] == [Reply(Resp.OKAY)] * 3
    assert out["r"] == [Reply(Resp.OKAY, 0x1000 + i) for i in (1, 2, 3)]
    assert out["leds"] == 0x1001 & 0x3F
    assert out["beyond"].resp == Resp.DECERR and out["unaligned"].resp == Resp.DECERR
