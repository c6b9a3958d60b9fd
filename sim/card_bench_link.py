"""PCIe links the simulated card can be benchmarked at, and a link's payload-limited rate (one formula).

The card's front end speaks the UltraScale+ block's AXI-stream interfaces at 256 or 512 bits. cocotbext-pcie's
model of that block accepts only the link speed, width and user clock combinations the hard block offers for an
interface width, and it drives the user clock itself; at 256 bits those are the six of LINKS_256, at 512 bits
Gen3 x16 and Gen4 x8 (LINKS_512, both at 250 MHz). Gen4 x16 is not an UltraScale+ PCIE4 configuration at all
(it would need 512 bits at 500 MHz): the model refuses it. Plain Python: no simulator needed to parse a link or
compute its rate.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

MAX_PAYLOAD_BYTES = 128  # the host's Max Payload Size unless `--mps` sets another: the card cuts its writes to it
# the card's Max_Read_Request_Size unless `--mrrs` sets another (512 bytes: Device Control's value at reset, which
# the host leaves unless it tunes it): the card cuts its reads to it
MAX_READ_REQUEST_BYTES = 512
SIZES = (128, 256, 512, 1024, 2048, 4096)  # the sizes Device Control can set

# Per generation: transfer rate (GT/s per lane) and line-encoding efficiency.
GENERATIONS = {1: (2.5, 8 / 10), 2: (5.0, 8 / 10), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130)}
# A memory write with a 64-bit address (host memory sits above 4 GiB) has a 4-DWORD header.
MWR64_HEADER_BYTES = 16
# Data-link framing per TLP: Gen1/2 STP (1) + sequence number (2) + LCRC (4) + END (1); Gen3/4 a 4-byte STP
# token (which carries the sequence number) + LCRC (4). 8 bytes either way, as cocotbext-pcie's link counts.
FRAMING_BYTES = 8

# (generation, lanes) -> user clock in MHz, per interface width (cocotbext-pcie's valid_configs).
LINKS_256 = {(2, 8): 125.0, (2, 16): 250.0, (3, 4): 125.0, (3, 8): 250.0, (4, 2): 125.0, (4, 4): 250.0}
LINKS_512 = {(3, 16): 250.0, (4, 8): 250.0}
LINKS = {**{k: (256, mhz) for k, mhz in LINKS_256.items()}, **{k: (512, mhz) for k, mhz in LINKS_512.items()}}
DEFAULT_LINK = "gen3x8"
_NAME = re.compile(r"gen([1-9])x([0-9]+)")


class LinkError(ValueError):
    """A link name that is malformed or that the front end cannot be simulated at."""


@dataclass(frozen=True)
class Link:
    generation: int
    lanes: int
    max_payload_bytes: int = MAX_PAYLOAD_BYTES
    max_read_request_bytes: int = MAX_READ_REQUEST_BYTES

    def __post_init__(self):
        if self.max_read_request_bytes not in SIZES:
            raise LinkError(f"max read request size must be 128..4096 bytes (a power of two), not "
                            f"{self.max_read_request_bytes}")

    @property
    def name(self) -> str:
        return f"gen{self.generation}x{self.lanes}"

    @property
    def user_clk_mhz(self) -> float:
        return LINKS[(self.generation, self.lanes)][1]

    @property
    def interface_bits(self) -> int:
        """The width of the block's streams at this link: the card must be built for it."""
        return LINKS[(self.generation, self.lanes)][0]

    @property
    def raw_gbps(self) -> float:
        """Bytes per ns (GB/s) the lanes carry after line encoding, before any packet overhead."""
        gts, encoding = GENERATIONS[self.generation]
        return gts * self.lanes * encoding / 8

    @property
    def payload_rate_gbps(self) -> float:
        return payload_rate_gbps(self.generation, self.lanes, self.max_payload_bytes)

    def as_dict(self) -> dict:
        return {**asdict(self), "name": self.name, "interface_bits": self.interface_bits,
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
    if max_payload_bytes not in SIZES:
        raise LinkError(f"max payload size must be 128..4096 bytes (a power of two), not {max_payload_bytes}")
    gts, encoding = GENERATIONS[generation]
    return gts * lanes * encoding / 8 * max_payload_bytes / (max_payload_bytes + header_bytes + framing_bytes)


def known_links(bits: int | None = None) -> list[str]:
    """The links the block model offers, at one interface width or at either."""
    return [f"gen{g}x{n}" for (g, n), (b, _) in sorted(LINKS.items()) if bits in (None, b)]


def parse_link(text: str) -> Link:
    """'gen3x8' -> Link; a clear error for anything the block model cannot run at either interface width."""
    m = _NAME.fullmatch(text.strip().lower())
    if not m:
        raise LinkError(f"a link is written genGxN, like {DEFAULT_LINK}; not {text!r}")
    gen, lanes = int(m.group(1)), int(m.group(2))
    if (gen, lanes) not in LINKS:
        raise LinkError(
            f"{text.strip()!r} cannot be simulated: the UltraScale+ block model runs a 256-bit interface only at "
            f"{', '.join(known_links(256))} and a 512-bit one at {', '.join(known_links(512))}"
            + (" (Gen4 x16 is not an UltraScale+ PCIE4 configuration: it would need 512 bits at 500 MHz)"
               if (gen, lanes) == (4, 16) else ""))
    return Link(gen, lanes)


def parse_links(text: str) -> tuple[Link, ...]:
    names = [t for t in text.split(",") if t.strip()]
    if not names:
        raise LinkError(f"want one or more links separated by commas, like {DEFAULT_LINK},gen4x4; not {text!r}")
    links = tuple(parse_link(t) for t in names)
    if len(set(links)) != len(links):
        raise LinkError(f"a link is named twice in {text!r}")
    return links
