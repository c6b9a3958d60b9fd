"""The PCIe IP's configuration (CONFIG.* of pcie4_uscale_plus) for a card, and its check: every key from a known
list, every value in its range, and the keys that must agree with the rest of the project (the front end's stream
width, the driver's PCI ids, the engine's BAR0 size, the board's lanes) agreeing with it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from driver.discovery import ARKDMA_PCI_IDS
from fpga.boards.spec import PcieBoard
from fpga.cores.pcie_card_top import USER_CLOCK_MHZ, bar0_bytes
from fpga.errors import FpgaFlowError
from rtl.params import EngineParams
from rtl.pcie_completer import WIDTH

XILINX_VENDOR_ID = 0x10EE
VENDOR_ID, DEVICE_ID = next(ids for ids in ARKDMA_PCI_IDS if ids[0] == XILINX_VENDOR_ID)
CLASS_CODE = 0x058000  # memory controller, other: no class driver claims it
LINK_GTS = {"2.5_GT/s": 2.5, "5.0_GT/s": 5.0, "8.0_GT/s": 8.0, "16.0_GT/s": 16.0}
ENCODING = {"2.5_GT/s": 8 / 10, "5.0_GT/s": 8 / 10, "8.0_GT/s": 128 / 130, "16.0_GT/s": 128 / 130}
BAR_SCALES = {"Kilobytes": 1 << 10, "Megabytes": 1 << 20, "Gigabytes": 1 << 30}


class IpConfigError(FpgaFlowError):
    """The PCIe IP's configuration has an unknown key, a value out of range or a value that disagrees."""


@dataclass(frozen=True)
class Rule:
    allowed: str  # said in the error
    accepts: Callable[[str], bool]


def _choice(*values: str) -> Rule:
    return Rule(" or ".join(values), lambda v: v in values)


def _hex(digits: int) -> Rule:
    return Rule(f"{digits} hex digits", lambda v: re.fullmatch(f"[0-9A-Fa-f]{{{digits}}}", v) is not None)


def _pattern(regex: str, said: str) -> Rule:
    return Rule(said, lambda v: re.fullmatch(regex, v) is not None)


def _power_of_two(low: int, high: int) -> Rule:
    return Rule(f"a power of two {low}..{high}",
                lambda v: v.isdigit() and low <= int(v) <= high and int(v) & (int(v) - 1) == 0)


BOOL = _choice("true", "false")
ALIGNMENT = _choice("DWORD_Aligned", "Address_Aligned")

# Every key the flow may set, with its range (PG213's parameter names as the IP's Tcl spells them).
KNOWN: dict[str, Rule] = {
    "PL_LINK_CAP_MAX_LINK_SPEED": _choice(*LINK_GTS),
    "PL_LINK_CAP_MAX_LINK_WIDTH": _choice("X1", "X2", "X4", "X8", "X16"),
    "axisten_if_width": _choice("64_bit", "128_bit", "256_bit", "512_bit"),
    "axisten_freq": _choice("62.5", "125", "250", "500"),
    "AXISTEN_IF_RC_STRADDLE": BOOL,
    "axisten_if_enable_client_tag": BOOL,
    "extended_tag_field": BOOL,
    "AXISTEN_IF_CQ_ALIGNMENT_MODE": ALIGNMENT,
    "AXISTEN_IF_CC_ALIGNMENT_MODE": ALIGNMENT,
    "AXISTEN_IF_RQ_ALIGNMENT_MODE": ALIGNMENT,
    "AXISTEN_IF_RC_ALIGNMENT_MODE": ALIGNMENT,
    "vendor_id": _hex(4),
    "PF0_DEVICE_ID": _hex(4),
    "PF0_SUBSYSTEM_VENDOR_ID": _hex(4),
    "PF0_SUBSYSTEM_ID": _hex(4),
    "PF0_CLASS_CODE": _hex(6),
    "pf0_bar0_type": _choice("Memory"),
    "pf0_bar0_64bit": BOOL,
    "pf0_bar0_prefetchable": BOOL,
    "pf0_bar0_scale": _choice(*BAR_SCALES),
    "pf0_bar0_size": _power_of_two(1, 512),
    "mode_selection": _choice("Basic", "Advanced"),
    "pcie_blk_locn": _pattern(r"X\dY\d", "a block site such as X1Y2"),
    "en_gt_selection": BOOL,
    "select_quad": _pattern(r"GTY_Quad_\d{3}", "a GTY quad such as GTY_Quad_227"),
}
# Keys set only where the IP version has them (Vivado lists its properties first): the IP's default already
# matches, so an IP without the key is no error. All four streams DWORD-aligned is what the front end parses.
OPTIONAL = ("AXISTEN_IF_CQ_ALIGNMENT_MODE", "AXISTEN_IF_CC_ALIGNMENT_MODE", "AXISTEN_IF_RQ_ALIGNMENT_MODE",
            "AXISTEN_IF_RC_ALIGNMENT_MODE", "select_quad")


def bar_size(nbytes: int) -> tuple[str, str]:
    """(pf0_bar0_scale, pf0_bar0_size) of a BAR of `nbytes` (a power of two, 4 KiB or more)."""
    if nbytes < 4096 or nbytes & (nbytes - 1):
        raise IpConfigError(f"BAR0 must be a power of two of 4 KiB or more, not {nbytes} bytes")
    scale = max((s for s, unit in BAR_SCALES.items() if nbytes >= unit), key=BAR_SCALES.get)
    return scale, str(nbytes // BAR_SCALES[scale])


def ip_config(params: EngineParams, board: PcieBoard) -> dict[str, str]:
    scale, size = bar_size(bar0_bytes(params))
    return {
        "PL_LINK_CAP_MAX_LINK_SPEED": "8.0_GT/s",
        "PL_LINK_CAP_MAX_LINK_WIDTH": f"X{board.pcie_lanes}",
        "axisten_if_width": f"{WIDTH}_bit",
        "axisten_freq": f"{USER_CLOCK_MHZ:g}",
        "AXISTEN_IF_RC_STRADDLE": "false",  # the front end takes one TLP per beat
        "axisten_if_enable_client_tag": "true",  # the requester tags reads with the engine's AXI IDs
        "extended_tag_field": "true",
        **{key: "DWORD_Aligned" for key in OPTIONAL if key.endswith("ALIGNMENT_MODE")},
        "vendor_id": f"{VENDOR_ID:04X}",
        "PF0_DEVICE_ID": f"{DEVICE_ID:04X}",
        "PF0_SUBSYSTEM_VENDOR_ID": f"{VENDOR_ID:04X}",
        "PF0_SUBSYSTEM_ID": f"{DEVICE_ID:04X}",
        "PF0_CLASS_CODE": f"{CLASS_CODE:06X}",
        "pf0_bar0_type": "Memory",
        "pf0_bar0_64bit": "true",
        "pf0_bar0_prefetchable": "false",  # registers: a read must reach the engine
        "pf0_bar0_scale": scale,
        "pf0_bar0_size": size,
        "mode_selection": "Advanced",
        "pcie_blk_locn": board.pcie_block,
        "en_gt_selection": "true",
        "select_quad": board.pcie_quad,
    }


def check_ip_config(config: dict[str, str], params: EngineParams, board: PcieBoard) -> list[str]:
    """Raises IpConfigError at the first problem; returns what was checked, one line each."""
    for key, value in config.items():
        if key not in KNOWN:
            raise IpConfigError(f"CONFIG.{key} is not a key this flow knows; known keys: {', '.join(KNOWN)}")
        if not KNOWN[key].accepts(str(value)):
            raise IpConfigError(f"CONFIG.{key} = {value!r} is out of range: {KNOWN[key].allowed}")
    missing = [k for k in ("PL_LINK_CAP_MAX_LINK_SPEED", "PL_LINK_CAP_MAX_LINK_WIDTH", "axisten_if_width",
                           "axisten_freq", "vendor_id", "PF0_DEVICE_ID", "pf0_bar0_scale", "pf0_bar0_size")
               if k not in config]
    if missing:
        raise IpConfigError(f"the IP configuration lacks {', '.join('CONFIG.' + k for k in missing)}")

    if config["axisten_if_width"] != f"{WIDTH}_bit":
        raise IpConfigError(f"CONFIG.axisten_if_width = {config['axisten_if_width']}, but the front end "
                            f"(rtl/pcie_completer.py) is built for {WIDTH}-bit streams")
    lanes = int(config["PL_LINK_CAP_MAX_LINK_WIDTH"][1:])
    if lanes != board.pcie_lanes:
        raise IpConfigError(f"CONFIG.PL_LINK_CAP_MAX_LINK_WIDTH = X{lanes}, but {board.name} wires "
                            f"{board.pcie_lanes} lanes to the block")
    speed = config["PL_LINK_CAP_MAX_LINK_SPEED"]
    link_gbps = LINK_GTS[speed] * ENCODING[speed] * lanes
    if_gbps = WIDTH * float(config["axisten_freq"]) / 1000
    if if_gbps < link_gbps:
        raise IpConfigError(f"a {WIDTH}-bit interface at {config['axisten_freq']} MHz carries {if_gbps:g} Gb/s, "
                            f"less than the link's {link_gbps:.1f} Gb/s at {speed} x{lanes}")
    if float(config["axisten_freq"]) != USER_CLOCK_MHZ:
        raise IpConfigError(f"CONFIG.axisten_freq = {config['axisten_freq']} MHz, but the card top is timed "
                            f"for a {USER_CLOCK_MHZ:g} MHz user clock")
    ids = (int(config["vendor_id"], 16), int(config["PF0_DEVICE_ID"], 16))
    if ids not in ARKDMA_PCI_IDS:
        raise IpConfigError(f"PCI ids {ids[0]:04x}:{ids[1]:04x} are not ones the driver looks for "
                            f"({', '.join(f'{v:04x}:{d:04x}' for v, d in ARKDMA_PCI_IDS)}, driver/discovery.py)")
    bar = int(config["pf0_bar0_size"]) * BAR_SCALES[config["pf0_bar0_scale"]]
    if bar != bar0_bytes(params):
        raise IpConfigError(f"BAR0 is {bar} bytes in the IP but the engine's registers and windows need "
                            f"{bar0_bytes(params)} bytes")
    if config.get("pf0_bar0_64bit") != "true":
        raise IpConfigError("BAR0 must be a 64-bit BAR (CONFIG.pf0_bar0_64bit true)")
    for key in ("AXISTEN_IF_RC_STRADDLE",):
        if config.get(key, "false") != "false":
            raise IpConfigError(f"CONFIG.{key} must be false: the front end takes one TLP per beat")
    for key in (k for k in OPTIONAL if k.endswith("ALIGNMENT_MODE")):
        if config.get(key, "DWORD_Aligned") != "DWORD_Aligned":
            raise IpConfigError(f"CONFIG.{key} must be DWORD_Aligned: the front end parses DWORD-aligned streams")
    return [f"{len(config)} IP CONFIG keys known and in range",
            f"{speed} x{lanes} fits a {WIDTH}-bit interface at {config['axisten_freq']} MHz "
            f"({if_gbps:g} >= {link_gbps:.1f} Gb/s)",
            f"PCI ids {ids[0]:04x}:{ids[1]:04x} are the driver's; BAR0 {bar} bytes, 64-bit, as the engine needs"]
