"""The ECP5-5G EVN board top: 12 MHz oscillator -> PLL -> the core's clock, reset, UART pins and LEDs."""

from __future__ import annotations

from amaranth import ClockDomain, ClockSignal, Elaboratable, Instance, Module, Signal
from amaranth.lib import cdc, io, wiring
from amaranth.lib.wiring import In, Out

from fpga.flow.pll import MODULE as PLL_MODULE, PllConfig

BOARD_CLOCK_MHZ = 12.0  # the EVN's oscillator on pin A10
STATUS_LEDS = 6  # LEDs 2..7 show the core's status; LED 0 blinks, LED 1 is the PLL's lock


class BoardCoreSignature(wiring.Signature):
    """What a core placed on the board offers: a UART and status bits for the LEDs."""

    def __init__(self):
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1), "status": Out(STATUS_LEDS)})


class EvnTop(Elaboratable):
    """Runs `core` (a component with BoardCoreSignature's members) in the `sync` domain at the PLL's clock.

    Reset: the PLL not yet locked, or the board's reset button (G2), synchronized to the PLL clock."""

    def __init__(self, core: wiring.Component, pll: PllConfig):
        missing = {"rx", "tx", "status"} - set(core.signature.members)
        if missing:
            raise TypeError(f"the board core lacks the members {sorted(missing)} of BoardCoreSignature")
        self.core, self.pll = core, pll

    def elaborate(self, platform):
        m = Module()
        platform.add_file(f"{PLL_MODULE}.v", self.pll.verilog)

        m.submodules.clk12 = clk12 = io.Buffer("i", platform.request("clk12", 0, dir="-"))
        m.submodules.rst_n = rst_button = io.Buffer("i", platform.request("rst", 0, dir="-"))
        m.domains.sync = ClockDomain("sync")
        locked = Signal()
        m.submodules.pll = Instance(PLL_MODULE, i_clkin=clk12.i, o_clkout0=ClockSignal("sync"), o_locked=locked)
        m.submodules.reset_sync = cdc.ResetSynchronizer(~locked | rst_button.i, domain="sync")

        m.submodules.core = core = self.core
        uart = platform.request("uart", 0, dir="-")
        m.submodules.uart_rx = rx = io.Buffer("i", uart.rx)
        m.submodules.uart_tx = tx = io.Buffer("o", uart.tx)
        m.submodules.rx_sync = cdc.FFSynchronizer(rx.i, core.rx, init=1)
        m.d.comb += tx.o.eq(core.tx)

        # LED 0 blinks at ~1 Hz (the clock runs), LED 1 is the PLL lock, the rest are the core's
        half_second = int(self.pll.output_mhz * 1e6 / 2)
        blink = Signal(range(half_second))
        beat = Signal()
        m.d.sync += blink.eq(blink + 1)
        with m.If(blink == half_second - 1):
            m.d.sync += [blink.eq(0), beat.eq(~beat)]
        leds = [beat, locked, *core.status]
        for i, value in enumerate(leds):
            m.submodules[f"led{i}"] = led = io.Buffer("o", platform.request("led", i, dir="-"))
            m.d.comb += led.o.eq(value)
        return m
