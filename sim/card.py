"""The card simulated through a PCIe model: the UltraScale+ PCIe block's completer interface (CQ/CC) before the
engine's registers and windows (BAR0), and its requester interface (RQ/RC) behind the engine's memory port,
so the engine reads and writes host memory across the link. cocotbext-pcie models the block and a root
complex with its memory (sim/card_session.py). The card itself is defined once, in fpga/cores/pcie_card_top.py,
where the board top puts it on the real block, with its engine's parameters (`card_params`: 256-bit by default,
`data_width=64` for the board-sized engine)."""

from __future__ import annotations

from fpga.cores.pcie_card_top import PcieCard as SimCard
from fpga.cores.pcie_card_top import bar0_bytes, card_params
from sim.build import Top

__all__ = ["CARD", "SimCard", "bar0_bytes", "card_params"]

CARD = Top("arkdma_card", SimCard, sources=("rtl", "fpga/cores", "sim/card.py"), suffix="_card")
