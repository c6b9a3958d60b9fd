"""A first bring-up core: the UART bridge over scratch registers, proving clock, pins and serial link."""

from __future__ import annotations

from amaranth import Array, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from driver.abi import Resp
from fpga.link.bridge_protocol import SCRATCH_ID_WORD as ID_WORD
from fpga.cores.evn_top import STATUS_LEDS
from fpga.cores.uart_bridge import UARTBridge



class ScratchCore(wiring.Component):
    """Address 0 reads ID_WORD; addresses 4 .. 4*registers hold read/write words, the first drives the LEDs;
    any other address answers DECERR."""

    def __init__(self, clock_mhz: float, baud: int = 115200, registers: int = 15):
        self.divisor = round(clock_mhz * 1e6 / baud)
        self.registers = registers
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1), "status": Out(STATUS_LEDS)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.bridge = bridge = UARTBridge(self.divisor, frame_timeout=100 * self.divisor)
        m.d.comb += [bridge.rx.eq(self.rx), self.tx.eq(bridge.tx)]
        regs = Array(Signal(32, name=f"scratch{i}") for i in range(self.registers))
        bus = bridge.bus
        index = bus.addr[2:] - 1
        m.d.comb += self.status.eq(regs[0])

        m.d.sync += bus.ready.eq(0)
        with m.If(bus.valid & ~bus.ready):
            m.d.sync += [bus.ready.eq(1), bus.rdata.eq(0), bus.resp.eq(Resp.OKAY)]
            with m.If(bus.addr == 0):
                m.d.sync += bus.rdata.eq(ID_WORD)
                with m.If(bus.write):
                    m.d.sync += bus.resp.eq(Resp.SLVERR)
            with m.Elif((bus.addr[:2] == 0) & (bus.addr[2:] <= self.registers)):
                with m.If(bus.write):
                    m.d.sync += regs[index].eq(bus.wdata)
                m.d.sync += bus.rdata.eq(regs[index])
            with m.Else():
                m.d.sync += bus.resp.eq(Resp.DECERR)
        return m
