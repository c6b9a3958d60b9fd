"""PCIe links the simulated card can be benchmarked at, and a link's payload-limited rate (one formula).

The card's front end speaks the UltraScale+ block's 256-bit AXI-stream interfaces. cocotbext-pcie's model of
that block accepts only the link speed, width and user clock combinations the hard block offers for an
interface width, and it drives the user clock itself; at 256 bits those are the six below. Gen3 x16 and
Gen4 x8 need the 512-bit interface; Gen4 x16 is not an UltraScale+ PCIE4 configuration at all. Plain Python:
no simulator needed to parse a link or compute its rate.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

INTERFACE_BITS = 256
MAX_PAYLOAD_BYTES = 128  # the host's Max Payload Size unless `--mps` sets another: the card cuts its writes to it

# Per generation: transfer rate (GT/s per lane) and line-encoding efficiency.
GENERATIONS = {1: (2.5, 8 / 10), 2: (5.0, 8 / 10), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130)}
# A memory write with a 64-bit address (host memory sits above 4 GiB) has a 4-DWORD header.
MWR64_HEADER_BYTES = 16
# Data-link framing per TLP: Gen1/2 STP (1) + sequence number (2) + LCRC (4) + END (1); Gen3/4 a 4-byte STP
# token (which carries the sequence number) + LCRC (4). 8 bytes either way, as cocotbext-pcie's link counts.
FRAMING_BYTES = 8

# (generation, lanes) -> user clock in MHz, for the 256-bit interface (cocotbext-pcie's valid_configs).
LINKS_256 = {(2, 8): 125.0, (2, 16): 250.0, (3, 4): 125.0, (3, 8): 250.0, (4, 2): 125.0, (4, 4): 250.0}
DEFAULT_LINK = "gen3x8"
_NAME = re.compile(r"gen([1-9])x([0-9]+)")


class LinkError(ValueError):
    """A link name that is malformed or that the 256-bit front end cannot represent."""


@dataclass(frozen=True)
class Link:
    generation: int
    lanes: int
    max_payload_bytes: int = MAX_PAYLOAD_BYTES

    @property
    def name(self) -> str:
        return f"gen{self.generation}x{self.lanes}"

    @property
    def user_clk_mhz(self) -> float:
        return LINKS_256[(self.generation, self.lanes)]

    @property
    def raw_gbps(self) -> float:
        """Bytes per ns (GB/s) the lanes carry after line encoding, before any packet overhead."""
        gts, encoding = GENERATIONS[self.generation]
        return gts * self.lanes * encoding / 8

    @property
    def payload_rate_gbps(self) -> float:
        return payload_rate_gbps(self.generation, self.lanes, self.max_payload_bytes)

    def as_dict(self) -> dict:
        return {**asdict(self), "name": self.name, "interface_bits": INTERFACE_BITS,
                "user_clk_mhz": self.user_clk_mhz, "raw_gbps": self.raw_gbps,
                "payload_rate_gbps": self.payload_rate_gbps, "rate_formula": RATE_FORMULA}


RATE_FORMULA = (f"GT/s x lanes x encoding / 8 x MPS / (MPS + {MWR64_HEADER_BYTES} B 4-DW memory-write header "
                f"+ {FRAMING_BYTES} B framing); DLLPs (ACK, UpdateFC) not counted, so an upper bound")


def payload_rate_gbps(generation: int, lanes: int, max_payload_bytes: int = MAX_PAYLOAD_BYTES,
                      header_bytes: int = MWR64_HEADER_BYTES, framing_bytes: int = FRAMING_BYTES) -> float:
    """GB/s of payload one direction of the link carries in full-size TLPs: the encoded lane rate times the
    share of each TLP that is payload. The card's copies cross the link twice (read completions in, memory
    writes out, on separate directions); the writes, with the larger header, set the limit."""
    if generation not in GENERATIONS:
        raise LinkError(f"PCIe generation must be one of {sorted(GENERATIONS)}, not {generation}")
    if lanes not in (1, 2, 4, 8, 16):
        raise LinkError(f"a link has 1, 2, 4, 8 or 16 lanes, not {lanes}")
    if max_payload_bytes not in (128, 256, 512, 1024, 2048, 4096):
        raise LinkError(f"max payload size must be 128..4096 bytes (a power of two), not {max_payload_bytes}")
    gts, encoding = GENERATIONS[generation]
    return gts * lanes * encoding / 8 * max_payload_bytes / (max_payload_bytes + header_bytes + framing_bytes)


def known_links() -> list[str]:
    return [f"gen{g}x{n}" for g, n in sorted(LINKS_256)]


def parse_link(text: str) -> Link:
    """'gen3x8' -> Link; a clear error for anything the 256-bit front end cannot be simulated at."""
    m = _NAME.fullmatch(text.strip().lower())
    if not m:
        raise LinkError(f"a link is written genGxN, like {DEFAULT_LINK}; not {text!r}")
    gen, lanes = int(m.group(1)), int(m.group(2))
    if (gen, lanes) not in LINKS_256:
        raise LinkError(
            f"{text.strip()!r} cannot be simulated: the card's PCIe front end is {INTERFACE_BITS}-bit, and the "
            f"UltraScale+ block model runs a {INTERFACE_BITS}-bit interface only at {', '.join(known_links())} "
            "(Gen3 x16 and Gen4 x8 need the 512-bit interface)")
    return Link(gen, lanes)


def parse_links(text: str) -> tuple[Link, ...]:
    names = [t for t in text.split(",") if t.strip()]
    if not names:
        raise LinkError(f"want one or more links separated by commas, like {DEFAULT_LINK},gen4x4; not {text!r}")
    links = tuple(parse_link(t) for t in names)
    if len(set(links)) != len(links):
        raise LinkError(f"a link is named twice in {text!r}")
    return links
