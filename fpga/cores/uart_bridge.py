"""A UART register bridge for bring-up: the host reads and writes 32-bit words over a serial line.

Protocol (8N1, every multi-byte field little-endian):

    host -> FPGA  'W' (0x57), address (4 bytes), data (4 bytes)   FPGA -> host  resp (1 byte)
    host -> FPGA  'R' (0x52), address (4 bytes)                   FPGA -> host  resp (1 byte), data (4 bytes)
    host -> FPGA  any other byte                                  FPGA -> host  '?' (0x3F)

`resp` is the AXI response code (0 OKAY, 2 SLVERR, 3 DECERR). A frame that stalls longer than
`frame_timeout` clock cycles between two bytes is dropped without an answer, so a host that lost
its place sends nothing for that long and starts afresh.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from fpga.link.bridge_protocol import OP_READ, OP_WRITE, REPLY_UNKNOWN
from rtl.register_bus import RegisterBusSignature
from fpga.cores.uart import UARTRx, UARTTx


class UARTBridge(wiring.Component):
    def __init__(self, divisor: int, frame_timeout: int):
        if frame_timeout < 10 * divisor:
            raise ValueError(f"frame_timeout ({frame_timeout} cycles) must cover at least one byte "
                             f"({10 * divisor} cycles at divisor {divisor})")
        self.divisor, self.frame_timeout = divisor, frame_timeout
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1), "bus": Out(RegisterBusSignature())})

    def elaborate(self, platform):
        m = Module()
        m.submodules.urx = urx = UARTRx(self.divisor)
        m.submodules.utx = utx = UARTTx(self.divisor)
        m.d.comb += [urx.rx.eq(self.rx), self.tx.eq(utx.tx)]

        request = Signal(64)  # address, then data, as they arrive
        need = Signal(range(9))  # bytes of the frame still to come
        idle = Signal(range(self.frame_timeout + 1))
        reply = Signal(40)  # resp, then data
        reply_left = Signal(range(6))

        m.d.comb += [
            self.bus.addr.eq(request[:32]),
            self.bus.wdata.eq(request[32:]),
            self.bus.strb.eq(0xF),
            utx.data.payload.eq(reply[:8]),
        ]

        with m.FSM():
            with m.State("OPCODE"):
                m.d.comb += urx.data.ready.eq(1)
                with m.If(urx.data.valid):
                    m.d.sync += idle.eq(0)
                    with m.If(urx.data.payload == OP_WRITE):
                        m.d.sync += [self.bus.write.eq(1), need.eq(8)]
                        m.next = "ARGS"
                    with m.Elif(urx.data.payload == OP_READ):
                        m.d.sync += [self.bus.write.eq(0), need.eq(4)]
                        m.next = "ARGS"
                    with m.Else():
                        m.d.sync += [reply.eq(REPLY_UNKNOWN), reply_left.eq(1)]
                        m.next = "REPLY"
            with m.State("ARGS"):
                m.d.comb += urx.data.ready.eq(1)
                with m.If(urx.data.valid):
                    # bytes enter at the top of `request` and move down: after 8, address is request[:32]
                    m.d.sync += [request.eq(Cat(request[8:], urx.data.payload)), need.eq(need - 1), idle.eq(0)]
                    with m.If(need == 1):
                        m.next = "ALIGN"
                with m.Elif(idle == self.frame_timeout):
                    m.next = "OPCODE"
                with m.Else():
                    m.d.sync += idle.eq(idle + 1)
            with m.State("ALIGN"):
                # a read frame has 4 bytes, which sit in request[32:]: move them down to the address
                with m.If(~self.bus.write):
                    m.d.sync += request.eq(request[32:])
                m.next = "ACCESS"
            with m.State("ACCESS"):
                m.d.comb += self.bus.valid.eq(1)
                with m.If(self.bus.ready):
                    m.d.sync += [reply.eq(Cat(self.bus.resp, Const(0, 6), self.bus.rdata)),
                                 reply_left.eq(Const(1) + 4 * ~self.bus.write)]
                    m.next = "REPLY"
            with m.State("REPLY"):
                m.d.comb += utx.data.valid.eq(1)
                with m.If(utx.data.ready):
                    m.d.sync += [reply.eq(reply[8:]), reply_left.eq(reply_left - 1)]
                    with m.If(reply_left == 1):
                        m.next = "OPCODE"
        return m
