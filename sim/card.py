"""The card simulated through a PCIe model: the UltraScale+ PCIe block's completer interface (CQ/CC) before the
engine's registers and windows (BAR0), and its requester interface (RQ/RC) behind the engine's memory port,
so the engine reads and writes host memory across the link. cocotbext-pcie models the block and a root
complex with its memory (sim/card_session.py). The card itself is defined once, in fpga/cores/pcie_card_top.py,
where the board top puts it on the real block, with its engine's parameters (`card_params`: 256-bit by default,
`data_width=64` for the board-sized engine)."""

from __future__ import annotations

from fpga.cores.pcie_card_top import PcieCard as SimCard
from fpga.cores.pcie_card_top import bar0_bytes, card_params
from rtl.params import EngineParams
from sim.build import Top

__all__ = ["CARD", "SIM_READS_OUTSTANDING", "SESSION_GEOMETRY", "SimCard", "bar0_bytes", "card_params",
           "session_params"]

CARD = Top("arkdma_card", SimCard, sources=("rtl", "fpga/cores", "sim/card.py"), suffix="_card", quick_compile=True,
           build_time=lambda params: ("about 8 minutes: 12 MB of Verilog at 128 reads in flight"
                                      if params.reads_outstanding >= 128 else
                                      "a few minutes: the card's state per read grows with the reads in flight"
                                      if params.reads_outstanding > SIM_READS_OUTSTANDING else "about a minute"))

# Reads in flight of the card a functional simulation builds (the card-sim engine, the card sessions and their
# tests): the card's engine with 16 read IDs instead of 128. The read tracker and the requester keep state per
# read ID, so at 128 Amaranth writes about 12 MB of Verilog (6 minutes to convert on two cores, the whole build
# 8), at 16 about 2 MB (about 15 s; the whole build 1-1.5 minutes). Only the card bench needs 128 reads in flight, to
# cover the link's round trip at full rate; it builds the card as shipped unless told otherwise.
SIM_READS_OUTSTANDING = 16

# The card the card sessions (sim/card_*_session.py), their tests and the card bench's tests run on: the
# conformance suite's geometry (tests/conformance/builder.py), so that the card-sim engine's conformance run
# shares its Verilator build; one build per width.
SESSION_GEOMETRY = dict(num_queues=4, slots=16, num_regions=16, reads_outstanding=SIM_READS_OUTSTANDING)


def session_params(**given) -> EngineParams:
    """The card the card sessions run on: SESSION_GEOMETRY, `given` (e.g. data_width=512) on top."""
    return card_params(**{**SESSION_GEOMETRY, **given})
