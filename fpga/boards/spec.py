"""What the Vivado flow needs to know about a PCIe card: its part, the pins of each top-level port, its clocks,
where its PCIe hard block and transceivers sit, its configuration flash. Plain data; the XDC is written from it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Pin:
    """One package pin of a top-level port bit. `iostandard` is None for transceiver pins (no I/O buffer)."""

    site: str
    iostandard: str | None = None
    extra: tuple[tuple[str, str], ...] = ()  # further XDC properties, e.g. (("PULLUP", "true"),)


@dataclass(frozen=True)
class Port:
    """A top-level port: its name in the Verilog top, its direction and one pin per bit (bit 0 first)."""

    name: str
    direction: str  # "input" | "output"
    pins: tuple[Pin, ...]

    @property
    def width(self) -> int:
        return len(self.pins)


@dataclass(frozen=True)
class Clock:
    """A clock that enters on a top-level port (the P side of a differential pair)."""

    port: str
    mhz: float

    @property
    def period_ns(self) -> float:
        return round(1000.0 / self.mhz, 3)


@dataclass(frozen=True)
class Unverified:
    """A board fact that could not be checked against two independent public sources, and where it came from."""

    fact: str
    value: str
    source: str


@dataclass(frozen=True)
class PcieBoard:
    name: str
    description: str
    part: str
    ports: tuple[Port, ...]
    clocks: tuple[Clock, ...]
    pcie_lanes: int  # lanes wired to the PCIe block in this design (the edge connector may have more)
    pcie_block: str  # CONFIG.pcie_blk_locn of the PCIe IP
    pcie_quad: str  # CONFIG.select_quad: the GT quad that holds lane 0
    flash_part: str  # Vivado's cfgmem part name
    flash_interface: str  # write_cfgmem -interface
    flash_size_mb: int
    flash_address: int  # where the design's image goes in the flash
    bitstream_properties: tuple[tuple[str, str], ...]  # set_property NAME VALUE [current_design]
    hw_device: str  # the device's name in Vivado's hardware manager (get_hw_devices)
    unverified: tuple[Unverified, ...] = field(default=())

    def port(self, name: str) -> Port:
        for p in self.ports:
            if p.name == name:
                return p
        raise KeyError(f"{self.name} has no port {name!r}; ports: {', '.join(p.name for p in self.ports)}")
