"""The card simulated through a PCIe model, first part: the UltraScale+ PCIe block's completer interface (CQ/CC,
modelled by cocotbext-pcie) in front of the engine, its registers, windows and (for now) on-card RAM standing
in for host memory. BAR0: the engine's registers and windows in its lower half, the card RAM in its upper
half. The requester side (the engine's DMA to host and GPU memory over RQ/RC) is not built yet.
"""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.params import EngineParams
from rtl.pcie_completer import CC_USER_BITS, CQ_USER_BITS, WIDTH, PcieCompleter, axis_signature
from sim.build import Top

CARD_RAM_BYTES = 64 * 1024


def bar0_half(params: EngineParams, ram_bytes: int = CARD_RAM_BYTES) -> int:
    """Where the card RAM starts in BAR0 (a power of two holding the engine's BAR and the RAM)."""
    need = max(params.bar_bytes, ram_bytes)
    return 1 << (need - 1).bit_length()


class SimCard(wiring.Component):
    def __init__(self, params: EngineParams, ram_bytes: int = CARD_RAM_BYTES):
        self.params, self.ram_bytes = params, ram_bytes
        self.half = bar0_half(params, ram_bytes)
        super().__init__({
            "cq": In(axis_signature(WIDTH, CQ_USER_BITS)),
            "cc": Out(axis_signature(WIDTH, CC_USER_BITS)),
        })

    def elaborate(self, platform):
        from fpga.cores.engine_core import RAM_BASE, EngineOnBus

        m = Module()
        m.submodules.completer = completer = PcieCompleter()
        m.submodules.engine_on_bus = core = EngineOnBus(self.params, self.ram_bytes)
        wiring.connect(m, wiring.flipped(self.cq), completer.cq)
        wiring.connect(m, completer.cc, wiring.flipped(self.cc))
        bus, target = completer.bus, core.bus
        in_ram = bus.addr >= self.half
        m.d.comb += [
            target.addr.eq(bus.addr + in_ram * (RAM_BASE - self.half)),
            target.wdata.eq(bus.wdata), target.strb.eq(bus.strb), target.write.eq(bus.write),
            target.valid.eq(bus.valid),
            bus.ready.eq(target.ready), bus.rdata.eq(target.rdata), bus.resp.eq(target.resp),
        ]
        return m


CARD = Top("arkdma_card", SimCard, sources=("rtl", "fpga/cores", "sim/card.py"), suffix="_card")
