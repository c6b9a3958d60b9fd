"""The error log and its overflow flag at the register file (amaranth.sim), against a Python model of the rule
in docs/abi-rules.md: an entry that finds the log full is dropped and sets STATUS.ERRLOG_OVERFLOW; the flag
is write-1-to-clear (a write of 0, or of the other STATUS bits alone, leaves it; ERRLOG_POP leaves it; a drop
in the cycle of the clear leaves it set); a soft reset empties the log and clears it."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("amaranth", reason="the hardware extras are not installed: pip install 'arkdma[hw]'")

from amaranth import Elaboratable, Module, ResetInserter, Signal  # noqa: E402
from amaranth.lib import wiring  # noqa: E402
from amaranth.sim import Simulator  # noqa: E402

from driver.abi import GLOBAL  # noqa: E402
from rtl.error_log import ErrorLog  # noqa: E402
from rtl.register_file import RegisterFile  # noqa: E402

pytestmark = pytest.mark.sim
DEPTH = 4
STATUS, POP, HEAD, COOKIE = (GLOBAL.address(n) for n in ("STATUS", "ERRLOG_POP", "ERRLOG_HEAD", "ERRLOG_COOKIE"))
OVERFLOW = next(b for b in GLOBAL.register("STATUS").bits if b.name == "ERRLOG_OVERFLOW").mask
VALID = next(b for b in GLOBAL.register("STATUS").bits if b.name == "ERRLOG_VALID").mask


class _Bench(Elaboratable):
    """The register file reading an error log of DEPTH entries; `reset` resets the log as the engine's soft reset
    does (the register file itself stays)."""

    def __init__(self):
        self.regs = RegisterFile(num_queues=1, slots=16, num_regions=2, data_width=64)
        self.log = ErrorLog(DEPTH)
        self.reset = Signal()

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs = self.regs
        m.submodules.log = ResetInserter(self.reset)(self.log)
        wiring.connect(m, self.log.read, self.regs.log)
        return m


class _Model:
    """The rule, cycle by cycle, with the FIFO's timing: a push and a pop in one cycle both see the level before it."""

    def __init__(self):
        self.entries: list[int] = []
        self.overflow = False

    def cycle(self, push: int | None, pop: bool, clear: bool, reset: bool) -> None:
        if reset:
            self.entries, self.overflow = [], False
            return
        full, empty = len(self.entries) == DEPTH, not self.entries
        if push is not None and full:
            self.overflow = True
        elif clear:
            self.overflow = False
        if pop and not empty:
            self.entries.pop(0)
        if push is not None and not full:
            self.entries.append(push)


def _status_write(rng: random.Random) -> int:
    """Data for a STATUS write: the flag's bit alone, zero, every bit, or every bit but the flag's."""
    return rng.choice([OVERFLOW, 0, 0xFFFF_FFFF, 0xFFFF_FFFF & ~OVERFLOW, rng.getrandbits(32)])


@pytest.mark.parametrize("seed", range(4))
def test_overflow_flag_is_write_1_to_clear(seed):
    rng = random.Random(seed)
    dut = _Bench()
    bus = dut.regs.bus
    model = _Model()

    async def read(ctx, addr: int) -> int:
        ctx.set(bus.r_valid, 1)
        ctx.set(bus.r_addr, addr)
        await ctx.tick()
        ctx.set(bus.r_valid, 0)
        return ctx.get(bus.r_data)

    async def bench(ctx):
        cookie = 0
        for step in range(3000):
            # bursts of errors fill the log; pops, clears and resets come in between
            push = rng.random() < (0.6 if step % 200 < 100 else 0.15)
            write = rng.choices(["none", "pop", "status", "other"], [5, 2, 2, 1])[0]
            reset = rng.random() < 0.005
            data = _status_write(rng) if write == "status" else rng.getrandbits(32)
            addr = {"pop": POP, "status": STATUS, "other": rng.choice([HEAD, COOKIE, GLOBAL.address("ID")])}.get(write)
            ctx.set(dut.log.push.valid, push)
            ctx.set(dut.log.push.entry.cookie, cookie)
            ctx.set(bus.w_valid, addr is not None)
            ctx.set(bus.w_addr, addr or 0)
            ctx.set(bus.w_data, data)
            ctx.set(bus.w_strb, 0xF)
            ctx.set(dut.reset, reset)
            await ctx.tick()
            model.cycle(cookie if push else None, write == "pop", write == "status" and bool(data & OVERFLOW), reset)
            cookie += push
            for sig in (dut.log.push.valid, bus.w_valid, dut.reset):
                ctx.set(sig, 0)
            where = f"step {step} (seed {seed})"
            assert bool(ctx.get(dut.log.read.overflow)) == model.overflow, f"{where}: overflow flag"
            assert bool(ctx.get(dut.log.read.valid)) == bool(model.entries), f"{where}: log valid"
            if rng.random() < 0.1:  # through the register bus as a driver reads it
                status = await read(ctx, STATUS)
                assert bool(status & OVERFLOW) == model.overflow, f"{where}: STATUS {status:#x}"
                assert bool(status & VALID) == bool(model.entries), f"{where}: STATUS {status:#x}"
                if model.entries:
                    assert await read(ctx, COOKIE) == model.entries[0], f"{where}: ERRLOG_COOKIE is not the oldest"

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()


def test_the_overflow_flag_survives_a_drained_log_until_written_1():
    """The issue's sequence at the block: fill the log and drop one, pop it empty, write 0, write 1."""
    dut = _Bench()
    bus = dut.regs.bus

    async def write(ctx, addr: int, value: int) -> None:
        ctx.set(bus.w_valid, 1)
        ctx.set(bus.w_addr, addr)
        ctx.set(bus.w_data, value)
        ctx.set(bus.w_strb, 0xF)
        await ctx.tick()
        ctx.set(bus.w_valid, 0)

    async def bench(ctx):
        ctx.set(dut.log.push.valid, 1)
        await ctx.tick().repeat(DEPTH + 1)
        ctx.set(dut.log.push.valid, 0)
        assert ctx.get(dut.log.read.overflow)
        for _ in range(DEPTH):
            await write(ctx, POP, 0)
        assert not ctx.get(dut.log.read.valid) and ctx.get(dut.log.read.overflow), "popping the log clears nothing"
        await write(ctx, STATUS, 0xFFFF_FFFF & ~OVERFLOW)
        assert ctx.get(dut.log.read.overflow), "a STATUS write without the flag's bit leaves it"
        await write(ctx, STATUS, OVERFLOW)
        assert not ctx.get(dut.log.read.overflow), "writing 1 clears it"

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
