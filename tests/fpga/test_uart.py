# amaranth: UnusedElaboratable=no
"""The bring-up UART in amaranth.sim: bytes through a bit-level line model, baud error, framing errors."""

from __future__ import annotations

import random

import pytest
pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth import Module
from amaranth.sim import Simulator

from fpga.cores.uart import UARTRx, UARTTx

DIV = 16


def _line_bits(byte: int, stop: int = 1) -> list[int]:
    return [0] + [(byte >> i) & 1 for i in range(8)] + [stop]


def _run_rx(frames: list[tuple[int, int]], cycles_per_bit: float) -> tuple[list[int], int]:
    """Drives `rx` with (byte, stop bit) frames at `cycles_per_bit`; returns bytes received and framing errors."""
    dut = UARTRx(DIV)
    got, errors = [], [0]
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    async def drive(ctx):
        t = 0.0
        await ctx.tick().repeat(5)
        for byte, stop in frames:
            for bit in _line_bits(byte, stop) + [1, 1]:
                ctx.set(dut.rx, bit)
                t += cycles_per_bit
                await ctx.tick().repeat(int(t) - int(t - cycles_per_bit))
        await ctx.tick().repeat(4 * DIV)

    async def collect(ctx):
        ctx.set(dut.data.ready, 1)
        async for _, _, valid, payload, frame_error in ctx.tick().sample(dut.data.valid, dut.data.payload,
                                                                   dut.frame_error):
            if valid:
                got.append(payload)
            errors[0] += frame_error

    sim.add_testbench(drive)
    sim.add_process(collect)
    sim.run()
    return got, errors[0]


@pytest.mark.parametrize("rate_error", [-0.03, 0.0, 0.03])
def test_rx_decodes_bytes_within_baud_tolerance(rate_error):
    data = [0x00, 0xFF, 0x55, 0xAA, 0x01, 0x80] + random.Random(3).choices(range(256), k=10)
    got, errors = _run_rx([(b, 1) for b in data], DIV * (1 + rate_error))
    assert got == data and errors == 0


def test_rx_drops_a_byte_with_a_bad_stop_bit():
    got, errors = _run_rx([(0x12, 1), (0x34, 0), (0x56, 1)], DIV)
    assert got == [0x12, 0x56] and errors == 1


def test_tx_to_rx_loopback_at_full_rate():
    m = Module()
    m.submodules.tx = tx = UARTTx(DIV)
    m.submodules.rx = rx = UARTRx(DIV)
    m.d.comb += rx.rx.eq(tx.tx)
    data = random.Random(7).choices(range(256), k=20)
    got = []
    sim = Simulator(m)
    sim.add_clock(1e-6)

    async def send(ctx):
        for byte in data:
            ctx.set(tx.data.payload, byte)
            ctx.set(tx.data.valid, 1)
            await ctx.tick().until(tx.data.ready)
        ctx.set(tx.data.valid, 0)

    async def receive(ctx):
        ctx.set(rx.data.ready, 1)
        while len(got) < len(data):
            await ctx.tick().until(rx.data.valid)
            got.append(ctx.get(rx.data.payload))

    sim.add_testbench(send)
    sim.add_testbench(receive)
    sim.deadline = (len(data) + 2) * 10 * DIV * 1e-6
    sim.run_until(sim.deadline)
    assert got == data


def test_divisor_too_small_is_rejected():
    with pytest.raises(ValueError, match="at least 4"):
        UARTTx(2)
