"""AxiLiteSlave: the BAR's AXI4-Lite slave, turned into one-cycle register write and read strobes."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from driver.abi import Resp
from rtl.axi import axi_lite_signature


def register_bus_signature(addr_width: int) -> wiring.Signature:
    """A register bus as its master sees it: a write strobe, and a read strobe answered next cycle."""
    return wiring.Signature({
        "w_valid": Out(1), "w_addr": Out(addr_width), "w_data": Out(32), "w_strb": Out(4),
        "r_valid": Out(1), "r_addr": Out(addr_width), "r_data": In(32),
    })


class AxiLiteSlave(wiring.Component):
    """One write and one read at a time; a write needs its address and data together. Registers
    ignore byte strobes other than all-ones (every register is a whole 32-bit word)."""

    def __init__(self, addr_width: int):
        if addr_width < 3:
            raise ValueError(f"addr_width must be at least 3, not {addr_width}")
        self.addr_width = addr_width
        super().__init__({
            "axil": In(axi_lite_signature(addr_width)),
            "regs": Out(register_bus_signature(addr_width)),
        })

    def elaborate(self, platform):
        m = Module()
        a, r = self.axil, self.regs

        take_w = Signal()
        m.d.comb += take_w.eq(a.awvalid & a.wvalid & ~a.bvalid)
        m.d.comb += [
            a.awready.eq(take_w), a.wready.eq(take_w),
            r.w_valid.eq(take_w & (a.wstrb == 0xF)),
            r.w_addr.eq(a.awaddr & ~3), r.w_data.eq(a.wdata), r.w_strb.eq(a.wstrb),
        ]
        with m.If(take_w):
            m.d.sync += [a.bvalid.eq(1), a.bresp.eq(Mux(a.wstrb == 0xF, Resp.OKAY, Resp.SLVERR))]
        with m.Elif(a.bready):
            m.d.sync += a.bvalid.eq(0)

        pending = Signal()  # a read strobe went out last cycle: its data is on regs.r_data now
        take_r = Signal()
        m.d.comb += take_r.eq(a.arvalid & ~a.rvalid & ~pending)
        m.d.comb += [a.arready.eq(take_r), r.r_valid.eq(take_r), r.r_addr.eq(a.araddr & ~3)]
        m.d.sync += pending.eq(take_r)
        with m.If(pending):
            m.d.sync += [a.rvalid.eq(1), a.rdata.eq(r.r_data), a.rresp.eq(Resp.OKAY)]
        with m.Elif(a.rready):
            m.d.sync += a.rvalid.eq(0)
        return m

