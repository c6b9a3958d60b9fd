"""The card simulated through a PCIe model: the UltraScale+ PCIe block's completer interface (CQ/CC) before the
engine's registers and windows (BAR0), and its requester interface (RQ/RC) behind the engine's memory port,
so the engine reads and writes host memory across the link. cocotbext-pcie models the block and a root
complex with its memory (sim/card_session.py)."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.params import EngineParams
from rtl.pcie_completer import CC_USER_BITS, CQ_USER_BITS, WIDTH, PcieCompleter, axis_signature
from rtl.pcie_requester import RC_USER_BITS, RQ_USER_BITS, PcieRequester
from sim.build import Top


def bar0_bytes(params: EngineParams) -> int:
    """BAR0: the engine's registers and windows, rounded up to a power of two."""
    return 1 << (params.bar_bytes - 1).bit_length()


class SimCard(wiring.Component):
    def __init__(self, params: EngineParams):
        self.params = params
        super().__init__({
            "cq": In(axis_signature(WIDTH, CQ_USER_BITS)),
            "cc": Out(axis_signature(WIDTH, CC_USER_BITS)),
            "rq": Out(axis_signature(WIDTH, RQ_USER_BITS)),
            "rc": In(axis_signature(WIDTH, RC_USER_BITS)),
        })

    def elaborate(self, platform):
        from fpga.cores.engine_core import EngineOnBus

        p = self.params
        m = Module()
        m.submodules.completer = completer = PcieCompleter()
        m.submodules.engine_on_bus = core = EngineOnBus(p, ram_bytes=None)
        m.submodules.requester = requester = PcieRequester(id_width=p.read_id_width,
                                                           max_burst_beats=p.max_burst_beats)
        wiring.connect(m, wiring.flipped(self.cq), completer.cq)
        wiring.connect(m, completer.cc, wiring.flipped(self.cc))
        wiring.connect(m, completer.bus, core.bus)
        wiring.connect(m, core.mem, requester.mem)
        wiring.connect(m, requester.rq, wiring.flipped(self.rq))
        wiring.connect(m, wiring.flipped(self.rc), requester.rc)
        return m


CARD = Top("arkdma_card", SimCard, sources=("rtl", "fpga/cores", "sim/card.py"), suffix="_card")
