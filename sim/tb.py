"""EngineTB: the engine under cocotb with its bus models: clock, reset, BAR masters, host memory."""

from __future__ import annotations

import logging

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiMaster

from sim.host_memory import HostMemory, HostMemoryPort
from sim.job_types import Timing


class EngineTB:
    """Owns the bus models around one engine instance (see rtl/engine.py for its ports)."""

    def __init__(self, dut, timing: Timing = Timing()):
        self.dut, self.timing = dut, timing
        period_ps = round(timing.period_ns * 1000)
        self.period_ns = period_ps / 1000
        cocotb.start_soon(Clock(dut.clk, period_ps, unit="ps").start())
        self.memory = HostMemory()
        self.csr = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "csr_"), dut.clk, dut.rst)
        self.win = AxiMaster(AxiBus.from_prefix(dut, "win_"), dut.clk, dut.rst)
        for master in (self.csr, self.win):
            master.write_if.log.setLevel(logging.WARNING)
            master.read_if.log.setLevel(logging.WARNING)
        self.host = HostMemoryPort(dut, "mem_", dut.clk, dut.rst, self.memory, self.period_ns,
                                   timing.cycles(timing.read_latency_ns), timing.cycles(timing.write_latency_ns))

    async def reset(self, cycles: int = 8) -> None:
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, cycles)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    def now_cycles(self) -> int:
        return int(get_sim_time("ps") // round(self.period_ns * 1000))

    async def cycles(self, n: int) -> None:
        await ClockCycles(self.dut.clk, n)
