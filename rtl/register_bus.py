"""The register bus (one 32-bit access at a time) and BusToAxi, which turns its accesses into single-beat
AXI4 or AXI4-Lite transactions: how a bring-up bridge or a PCIe completer reaches the engine's ports."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from driver.abi import Resp
from rtl.axi import Burst, axi_lite_signature, axi_signature


class RegisterBusSignature(wiring.Signature):
    """One 32-bit access at a time: the initiator holds `valid` (and the request) until `ready`,
    which comes with `rdata` and `resp` for that one cycle. `strb`: the bytes of `wdata` a write sets."""

    def __init__(self):
        super().__init__({
            "addr": Out(32), "wdata": Out(32), "strb": Out(4, init=0xF), "write": Out(1), "valid": Out(1),
            "ready": In(1), "rdata": In(32), "resp": In(2),
        })


class BusToAxi(wiring.Component):
    """Writes put the word in its lane of a `data_width` beat with its strobe there (AxSIZE 2); reads take
    the word from its lane. With `id_width` None the port is AXI4-Lite, else AXI4 (ID 0, one beat).

    A slave that leaves a transaction unanswered for `timeout` cycles gets it withdrawn and the bus
    answers DECERR: that breaks the AXI rule that a raised valid stays until taken, which is what a
    bring-up bridge wants from a dead slave rather than a hang. Late responses are drained."""

    def __init__(self, addr_width: int, data_width: int, id_width: int | None, timeout: int):
        if data_width % 32 or data_width < 32:
            raise ValueError(f"data_width must be a multiple of 32, not {data_width}")
        if timeout < 2:
            raise ValueError(f"timeout must be at least 2 cycles, not {timeout}")
        self.addr_width, self.data_width, self.id_width, self.timeout = addr_width, data_width, id_width, timeout
        port = (axi_lite_signature(addr_width, data_width) if id_width is None
                else axi_signature(addr_width, data_width, id_width))
        super().__init__({"bus": In(RegisterBusSignature()), "axi": Out(port)})

    def elaborate(self, platform):
        m = Module()
        bus, a = self.bus, self.axi
        lanes = self.data_width // 32
        lane = bus.addr[2:2 + (lanes - 1).bit_length()] if lanes > 1 else Const(0, 1)
        timer = Signal(range(self.timeout + 1))
        addr_done, w_done = Signal(), Signal()  # AW (or AR) and W taken

        m.d.comb += [
            a.awaddr.eq(bus.addr), a.araddr.eq(bus.addr),
            a.wdata.eq(Cat(*([bus.wdata] * lanes))),
            a.wstrb.eq(bus.strb << (lane * 4)),
        ]
        if self.id_width is not None:
            m.d.comb += [a.awsize.eq(2), a.arsize.eq(2), a.awburst.eq(Burst.INCR), a.arburst.eq(Burst.INCR),
                         a.wlast.eq(1)]  # len 0 and ID 0 are the defaults

        m.d.sync += bus.ready.eq(0)

        def answer(resp, rdata=0):
            m.d.sync += [bus.ready.eq(1), bus.resp.eq(resp), bus.rdata.eq(rdata)]
            m.next = "IDLE"

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += [a.bready.eq(1), a.rready.eq(1)]  # drain what a timed-out slave still sends
                m.d.sync += [timer.eq(0), addr_done.eq(0), w_done.eq(0)]
                with m.If(bus.valid & ~bus.ready & bus.write):
                    # a write's address and data are offered at once, not a cycle later from WRITE
                    m.d.comb += [a.awvalid.eq(1), a.wvalid.eq(1)]
                    m.d.sync += [addr_done.eq(a.awready), w_done.eq(a.wready)]
                    m.next = "WRITE"
                with m.If(bus.valid & ~bus.ready & ~bus.write):
                    m.next = "READ"
            with m.State("WRITE"):
                m.d.comb += [a.awvalid.eq(~addr_done), a.wvalid.eq(~w_done), a.bready.eq(addr_done & w_done)]
                with m.If(a.awvalid & a.awready):
                    m.d.sync += addr_done.eq(1)
                with m.If(a.wvalid & a.wready):
                    m.d.sync += w_done.eq(1)
                with m.If(a.bvalid & a.bready):
                    answer(a.bresp)
                with m.Elif(timer == self.timeout):
                    answer(Resp.DECERR)
                with m.Else():
                    m.d.sync += timer.eq(timer + 1)
            with m.State("READ"):
                m.d.comb += [a.arvalid.eq(~addr_done), a.rready.eq(addr_done)]
                with m.If(a.arvalid & a.arready):
                    m.d.sync += addr_done.eq(1)
                with m.If(a.rvalid & a.rready):
                    answer(a.rresp, a.rdata.word_select(lane, 32))
                with m.Elif(timer == self.timeout):
                    answer(Resp.DECERR)
                with m.Else():
                    m.d.sync += timer.eq(timer + 1)
        return m
