"""Board descriptions for the vendor (Vivado) flow: part, pins, clocks, PCIe block placement and flash, as data.
The open-flow boards (the ECP5 EVN) are Amaranth platforms from amaranth-boards, named in fpga/flow/board_build.py."""

from __future__ import annotations

from fpga.boards.alveo_u250 import ALVEO_U250
from fpga.boards.spec import PcieBoard
from fpga.errors import FpgaFlowError

BOARDS: dict[str, PcieBoard] = {b.name: b for b in (ALVEO_U250,)}


def board(name: str) -> PcieBoard:
    if name not in BOARDS:
        raise FpgaFlowError(f"unknown PCIe board {name!r}; known PCIe boards: {', '.join(BOARDS)}")
    return BOARDS[name]
