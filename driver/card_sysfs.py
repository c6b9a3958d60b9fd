"""What sysfs says about an arkdma card before anything is opened: its PCIe link (current against maximum),
BAR0, the driver bound to it, its IOMMU group; and which card a PCI address (BDF) names."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from driver.bar import BarError, resource_size
from driver.discovery import ARKDMA_PCI_IDS, SYSFS_PCI, PciCard, cards
from driver.errors import ArkdmaError

# Vendors whose devices may be an FPGA carrying some other image (the factory shell, an old bitstream).
FPGA_VENDORS = {vendor for vendor, _ in ARKDMA_PCI_IDS}
BDF = re.compile(r"^(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")


class CardSelectionError(ArkdmaError):
    """No card, or not one card, matches what was asked; the message lists what is there."""


def normalize_bdf(text: str) -> str:
    """"65:00.0" or "0000:65:00.0" (any case) as sysfs names it: "0000:65:00.0"; ValueError otherwise."""
    m = BDF.match(text.strip().lower())
    if not m:
        raise ValueError(f"{text!r} is not a PCI address: want DOMAIN:BUS:DEVICE.FUNCTION such as 0000:65:00.0 "
                         "(or BUS:DEVICE.FUNCTION such as 65:00.0), as `lspci -D` prints it")
    domain, bus, dev, fn = m.groups()
    return f"{domain or '0000'}:{bus}:{dev}.{fn}"


@dataclass(frozen=True)
class Link:
    """The PCIe link as sysfs reports it: speeds as the kernel writes them ("8.0 GT/s PCIe"), widths in lanes;
    None where the file is missing (a virtual function, an old kernel)."""

    speed: str | None
    width: int | None
    max_speed: str | None
    max_width: int | None

    @property
    def down(self) -> bool:
        return self.width == 0 or (self.speed is not None and _gts(self.speed) is None)

    @property
    def below_max(self) -> bool:
        if self.down or None in (self.width, self.max_width, self.speed, self.max_speed):
            return False
        return self.width < self.max_width or (_gts(self.speed) or 0) < (_gts(self.max_speed) or 0)

    def describe(self) -> str:
        if self.speed is None and self.width is None:
            return "not reported by sysfs"
        now = f"{self.speed or '?'} x{self.width if self.width is not None else '?'}"
        most = f"{self.max_speed or '?'} x{self.max_width if self.max_width is not None else '?'}"
        return f"{now} (maximum {most})"


@dataclass(frozen=True)
class CardInfo:
    address: str
    vendor: int
    device: int
    link: Link
    bar0_bytes: int | None  # None when BAR0 is not assigned; bar0_problem says why
    bar0_problem: str
    enabled: bool | None  # the device's `enable` file; None where it is missing
    driver: str | None
    iommu_group: int | None

    @property
    def ids(self) -> str:
        return f"{self.vendor:04x}:{self.device:04x}"

    def as_dict(self) -> dict:
        link = {"text": self.link.describe(), "speed": self.link.speed, "width": self.link.width,
                "max_speed": self.link.max_speed, "max_width": self.link.max_width, "down": self.link.down,
                "below_max": self.link.below_max}
        return {"address": self.address, "ids": self.ids, "link": link, "bar0_bytes": self.bar0_bytes,
                "bar0_problem": self.bar0_problem or None, "enabled": self.enabled, "driver": self.driver,
                "iommu_group": self.iommu_group}


def _gts(speed: str) -> float | None:
    try:
        return float(speed.split()[0])
    except (ValueError, IndexError):
        return None  # "Unknown": the link is down


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _int(path: Path) -> int | None:
    text = _text(path)
    try:
        return int(text, 0) if text is not None else None
    except ValueError:
        return None


def _link_name(path: Path) -> str | None:
    return os.path.basename(os.readlink(path)) if path.is_symlink() else None


def describe(card: PciCard) -> CardInfo:
    dev = card.sysfs
    link = Link(_text(dev / "current_link_speed"), _int(dev / "current_link_width"),
                _text(dev / "max_link_speed"), _int(dev / "max_link_width"))
    try:
        bar0, problem = resource_size(dev, 0), ""
    except BarError as exc:
        bar0, problem = None, str(exc)
    enable = _text(dev / "enable")
    group = _link_name(dev / "iommu_group")
    return CardInfo(card.address, card.vendor, card.device, link, bar0, problem,
                    None if enable is None else enable != "0", _link_name(dev / "driver"),
                    int(group) if group and group.isdigit() else None)


def other_fpgas(sysfs: Path = SYSFS_PCI) -> list[tuple[str, str]]:
    """(address, vendor:device) of devices from an FPGA vendor without an arkdma device id: a card that
    runs another image."""
    found = []
    if not sysfs.is_dir():
        return found
    arkdma = set(ARKDMA_PCI_IDS)
    for dev in sorted(sysfs.iterdir()):
        vendor, device = _int(dev / "vendor"), _int(dev / "device")
        if vendor in FPGA_VENDORS and (vendor, device) not in arkdma and device is not None:
            found.append((dev.name, f"{vendor:04x}:{device:04x}"))
    return found


def select(sysfs: Path, device: str | None) -> tuple[list[PciCard], PciCard]:
    """Every arkdma card in `sysfs`, and the one to probe: `device` (a BDF), or the only card there is.
    CardSelectionError saying what is there otherwise."""
    found, why = cards(sysfs)
    listing = ", ".join(c.address for c in found)
    ids = " or ".join(f"{v:04x}:{d:04x}" for v, d in ARKDMA_PCI_IDS)
    if device is not None:
        address = normalize_bdf(device)
        for c in found:
            if c.address == address:
                return found, c
        there = sysfs / address
        if there.is_dir():
            other = f"{_int(there / 'vendor') or 0:04x}:{_int(there / 'device') or 0:04x}"
            raise CardSelectionError(f"{address} is {other}, not an arkdma card ({ids})"
                                     + (f"; the arkdma cards here: {listing}" if found else "")
                                     + _other_image_hint([(address, other)]))
        raise CardSelectionError(f"no PCI device {address} in {sysfs}"
                                 + (f"; the arkdma cards here: {listing}" if found else f"; {why}")
                                 + " (`lspci -D -d 10ee:` lists the Xilinx devices)")
    if not found:
        raise CardSelectionError(f"no arkdma card: {why}" + _other_image_hint(other_fpgas(sysfs))
                                 + "; check the link (LEDs, `lspci -d 10ee:`) and that arkdma.bit is loaded, then "
                                 "rescan (`echo 1 | sudo tee /sys/bus/pci/rescan`) or warm-reboot")
    if len(found) > 1:
        raise CardSelectionError(f"{len(found)} arkdma cards ({listing}): name one with --device BDF")
    return found, found[0]


def _other_image_hint(others: list[tuple[str, str]]) -> str:
    fpgas = [(a, i) for a, i in others if int(i.split(":")[0], 16) in FPGA_VENDORS]
    if not fpgas:
        return ""
    named = ", ".join(f"{a} ({i})" for a, i in fpgas)
    return (f"; FPGA devices with other ids: {named}: wrong ids, the card runs another image (the factory "
            "shell or an older bitstream): load arkdma.bit (arkdma fpga flash)")
