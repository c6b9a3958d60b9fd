"""An 8N1 UART receiver and transmitter with byte streams, for the board's bring-up bridge."""

from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import cdc, stream, wiring
from amaranth.lib.wiring import In, Out


def _check_divisor(divisor: int) -> None:
    if divisor < 4:
        raise ValueError(f"the UART divisor (clock cycles per bit) must be at least 4, not {divisor}; "
                         "lower the baud rate or raise the clock")


class UARTRx(wiring.Component):
    """Samples `rx` in the middle of each bit; a byte whose stop bit reads 0 is dropped and pulses `frame_error`.
    A byte that arrives while the previous one still waits on `data` is dropped and pulses `overrun`."""

    def __init__(self, divisor: int):
        _check_divisor(divisor)
        self.divisor = divisor
        super().__init__({
            "rx": In(1, init=1),
            "data": Out(stream.Signature(8)),
            "frame_error": Out(1),
            "overrun": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        rx = Signal(init=1)
        m.submodules.sync_rx = cdc.FFSynchronizer(self.rx, rx, init=1)
        timer = Signal(range(self.divisor + self.divisor // 2))
        bits = Signal(range(9))
        shift = Signal(8)

        m.d.sync += [self.frame_error.eq(0), self.overrun.eq(0)]
        with m.If(self.data.valid & self.data.ready):
            m.d.sync += self.data.valid.eq(0)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(~rx):
                    # first data bit centre: one and a half bits after the start edge
                    m.d.sync += [timer.eq(self.divisor + self.divisor // 2 - 2), bits.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                with m.If(timer == 0):
                    m.d.sync += [shift.eq(Cat(shift[1:], rx)), bits.eq(bits + 1), timer.eq(self.divisor - 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("STOP"):
                with m.If(timer == 0):
                    with m.If(~rx):
                        m.d.sync += self.frame_error.eq(1)
                        m.next = "BREAK"
                    with m.Elif(self.data.valid & ~self.data.ready):
                        m.d.sync += self.overrun.eq(1)
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [self.data.payload.eq(shift), self.data.valid.eq(1)]
                        m.next = "IDLE"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("BREAK"):
                # a line held low (break, or a framing slip) must go high before the next start bit counts
                with m.If(rx):
                    m.next = "IDLE"
        return m


class UARTTx(wiring.Component):
    """Sends each byte of `data` as start bit, 8 data bits (LSB first), stop bit."""

    def __init__(self, divisor: int):
        _check_divisor(divisor)
        self.divisor = divisor
        super().__init__({
            "tx": Out(1, init=1),
            "data": In(stream.Signature(8)),
        })

    def elaborate(self, platform):
        m = Module()
        timer = Signal(range(self.divisor))
        shift = Signal(10, init=0x3FF)
        bits = Signal(range(11))

        m.d.comb += [self.tx.eq(shift[0]), self.data.ready.eq(bits == 0)]
        with m.If(self.data.valid & self.data.ready):
            m.d.sync += [shift.eq(Cat(0, self.data.payload, 1)), bits.eq(10), timer.eq(self.divisor - 1)]
        with m.Elif(bits != 0):
            with m.If(timer == 0):
                m.d.sync += [shift.eq(Cat(shift[1:], 1)), bits.eq(bits - 1), timer.eq(self.divisor - 1)]
            with m.Else():
                m.d.sync += timer.eq(timer - 1)
        return m
