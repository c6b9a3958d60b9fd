"""A card's BAR mapped into this process: through its sysfs resource file, or through VFIO (which also maps
host memory for the card's DMA through the IOMMU). Registers are read and written as single 32-bit accesses.

Each failure says what to do: no card, no permission, no IOMMU group, the card bound to another driver.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from driver.errors import ArkdmaError

PAGE = mmap.PAGESIZE


class BarError(ArkdmaError):
    """The BAR could not be mapped or used; the message says why and what to do."""


class Bar(ABC):
    """Register space of one engine: 32-bit reads and writes, and block writes into its windows."""

    size: int

    @abstractmethod
    def read32(self, offset: int) -> int: ...

    @abstractmethod
    def write32(self, offset: int, value: int) -> None: ...

    def write(self, offset: int, data: bytes) -> None:
        """A block write as consecutive 32-bit stores (the window takes whole descriptors)."""
        if len(data) % 4:
            raise ValueError(f"BAR block writes are whole 32-bit words; got {len(data)} bytes")
        for i, (word,) in enumerate(struct.iter_unpack("<I", data)):
            self.write32(offset + 4 * i, word)

    def check(self, offset: int, length: int = 4) -> None:
        if offset < 0 or offset % 4 or offset + length > self.size:
            raise BarError(f"BAR access [{offset:#x}, {offset + length:#x}) is unaligned or outside its {self.size:#x} bytes")

    @property
    def host_address(self) -> int:
        """Where the BAR is mapped in this process (0 when it is not memory-mapped)."""
        return 0

    def close(self) -> None: ...


class MappedBar(Bar):
    """A BAR mapped with mmap from a file descriptor (sysfs resourceN, a VFIO region, or a plain file in tests)."""

    def __init__(self, fd: int, size: int, offset: int = 0, what: str = "BAR"):
        if size <= 0 or size % PAGE:
            raise BarError(f"{what}: size {size:#x} is not a positive multiple of the page size")
        try:
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
        except OSError as exc:
            raise BarError(f"{what}: mmap of {size:#x} bytes failed ({exc}); is the BAR enabled and that large?") from exc
        self.size = size
        self._base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))

    @property
    def host_address(self) -> int:
        return self._base

    def read32(self, offset: int) -> int:
        self.check(offset)
        return ctypes.c_uint32.from_address(self._base + offset).value

    def write32(self, offset: int, value: int) -> None:
        self.check(offset)
        ctypes.c_uint32.from_address(self._base + offset).value = value & 0xFFFFFFFF

    def write(self, offset: int, data: bytes) -> None:
        self.check(offset, len(data))
        super().write(offset, data)

    def close(self) -> None:
        if self._map is not None:
            self._base = 0
            self._map.close()
            self._map = None


def _open(path: Path, what: str) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_SYNC)
    except FileNotFoundError as exc:
        raise BarError(f"{what}: {path} does not exist") from exc
    except PermissionError as exc:
        raise BarError(
            f"{what}: no permission to open {path}; run as root, or give your user access "
            f"(e.g. a udev rule, or `sudo chown $USER {path}`)"
        ) from exc


def resource_size(device: Path, bar: int) -> int:
    """BAR `bar`'s size from the device's sysfs `resource` table (start end flags per line)."""
    try:
        lines = (device / "resource").read_text().splitlines()
    except OSError as exc:
        raise BarError(f"cannot read {device / 'resource'} ({exc}); is {device.name} a PCI device?") from exc
    if bar >= len(lines):
        raise BarError(f"{device.name} has no BAR{bar}")
    start, end, _flags = (int(x, 16) for x in lines[bar].split())
    if end <= start:
        raise BarError(f"{device.name}'s BAR{bar} is not assigned (start {start:#x}, end {end:#x}); "
                       "check `lspci -vv` and the BIOS's PCI resource settings")
    return end - start + 1


def open_sysfs(device: Path, bar: int = 0) -> MappedBar:
    """Map BAR `bar` through sysfs (`resourceN`). Needs root or access to the file; no IOMMU is involved,
    so this gives register access but no safe DMA addresses (use VFIO for those)."""
    size = resource_size(device, bar)
    path = device / f"resource{bar}"
    enable = device / "enable"
    if enable.exists() and enable.read_text().strip() == "0":
        raise BarError(f"{device.name} is disabled; enable it (`echo 1 | sudo tee {enable}`)")
    fd = _open(path, f"BAR{bar} of {device.name}")
    try:
        return MappedBar(fd, size, 0, f"BAR{bar} of {device.name}")
    finally:
        os.close(fd)


# --- VFIO (linux/vfio.h) ---------------------------------------------------------------------

def _vfio_io(nr: int) -> int:
    return (ord(";") << 8) | (100 + nr)  # _IO(VFIO_TYPE, VFIO_BASE + nr)


VFIO_GET_API_VERSION = _vfio_io(0)
VFIO_CHECK_EXTENSION = _vfio_io(1)
VFIO_SET_IOMMU = _vfio_io(2)
VFIO_GROUP_GET_STATUS = _vfio_io(3)
VFIO_GROUP_SET_CONTAINER = _vfio_io(4)
VFIO_GROUP_GET_DEVICE_FD = _vfio_io(6)
VFIO_DEVICE_GET_REGION_INFO = _vfio_io(8)
VFIO_IOMMU_MAP_DMA = _vfio_io(13)
VFIO_IOMMU_UNMAP_DMA = _vfio_io(14)
VFIO_API_VERSION = 0
VFIO_TYPE1v2_IOMMU = 3
VFIO_GROUP_FLAGS_VIABLE = 1
VFIO_REGION_INFO_FLAG_MMAP = 4
VFIO_DMA_MAP_FLAG_READ, VFIO_DMA_MAP_FLAG_WRITE = 1, 2
REGION_INFO = struct.Struct("<IIIIQQ")  # argsz flags index cap_offset size offset
DMA_MAP = struct.Struct("<IIQQQ")  # argsz flags vaddr iova size
DMA_UNMAP = struct.Struct("<IIQQ")  # argsz flags iova size
GROUP_STATUS = struct.Struct("<II")  # argsz flags


@dataclass(frozen=True)
class VfioPlan:
    """What opening a device through VFIO needs, checked from sysfs before any ioctl."""

    group: int
    group_path: Path


def vfio_plan(device: Path, dev_vfio: Path = Path("/dev/vfio")) -> VfioPlan:
    """Check that `device` can be opened through VFIO; BarError saying what to do when not."""
    link = device / "iommu_group"
    if not link.exists():
        raise BarError(
            f"{device.name} has no IOMMU group: enable the IOMMU (kernel parameters intel_iommu=on or amd_iommu=on, "
            "and VT-d/AMD-Vi in the BIOS), or use the sysfs BAR mapping for register access without DMA"
        )
    driver = device / "driver"
    bound = os.path.basename(os.readlink(driver)) if driver.is_symlink() else None
    if bound != "vfio-pci":
        vendor = (device / "vendor").read_text().strip().removeprefix("0x")
        dev_id = (device / "device").read_text().strip().removeprefix("0x")
        raise BarError(
            f"{device.name} is bound to {bound or 'no driver'}, not vfio-pci: `sudo modprobe vfio-pci` then "
            f"`echo {vendor} {dev_id} | sudo tee /sys/bus/pci/drivers/vfio-pci/new_id`"
            + (f" (after `echo {device.name} | sudo tee {driver}/unbind`)" if bound else "")
        )
    group = int(os.path.basename(os.readlink(link)))
    path = dev_vfio / str(group)
    if not path.exists():
        raise BarError(f"{path} does not exist although {device.name} is in IOMMU group {group}; is vfio-pci loaded?")
    if not os.access(path, os.R_OK | os.W_OK):
        raise BarError(f"no permission to open {path}; run as root or `sudo chown $USER {path}`")
    return VfioPlan(group, path)


def _ioctl(fd: int, request: int, arg, what: str):
    try:
        return fcntl.ioctl(fd, request, arg)
    except OSError as exc:
        hint = " (the group holds devices of other drivers: bind all of them to vfio-pci)" if exc.errno == errno.EPERM else ""
        raise BarError(f"VFIO {what} failed: {exc}{hint}") from exc


class Vfio:
    """A VFIO container, group and device for one card: its BARs, and DMA mappings of host memory."""

    def __init__(self, device: Path, dev_vfio: Path = Path("/dev/vfio")):
        plan = vfio_plan(device, dev_vfio)
        self.container = _open(dev_vfio / "vfio", "VFIO container")
        self.group = -1
        self.device = -1
        try:
            if _ioctl(self.container, VFIO_GET_API_VERSION, 0, "API version") != VFIO_API_VERSION:
                raise BarError("this kernel's VFIO API version is not the one this driver speaks")
            if not _ioctl(self.container, VFIO_CHECK_EXTENSION, VFIO_TYPE1v2_IOMMU, "type1v2 check"):
                raise BarError("the kernel's VFIO has no type1v2 IOMMU backend")
            self.group = _open(plan.group_path, f"VFIO group {plan.group}")
            status = _ioctl(self.group, VFIO_GROUP_GET_STATUS, GROUP_STATUS.pack(GROUP_STATUS.size, 0), "group status")
            if not GROUP_STATUS.unpack(status)[1] & VFIO_GROUP_FLAGS_VIABLE:
                raise BarError(f"IOMMU group {plan.group} is not viable: bind every device in "
                               f"/sys/kernel/iommu_groups/{plan.group}/devices to vfio-pci")
            _ioctl(self.group, VFIO_GROUP_SET_CONTAINER, struct.pack("<i", self.container), "set container")
            _ioctl(self.container, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU, "set IOMMU")
            self.device = _ioctl(self.group, VFIO_GROUP_GET_DEVICE_FD, device.name.encode() + b"\0", "get device")
        except BaseException:
            self.close()
            raise
        self._next_iova = 1 << 32  # IOVAs handed out from 4 GiB up
        self._maps: dict[int, int] = {}  # iova -> size

    def bar(self, index: int = 0) -> MappedBar:
        info = REGION_INFO.pack(REGION_INFO.size, 0, index, 0, 0, 0)
        _, flags, _, _, size, offset = REGION_INFO.unpack(_ioctl(self.device, VFIO_DEVICE_GET_REGION_INFO, info,
                                                                 f"BAR{index} info"))
        if not flags & VFIO_REGION_INFO_FLAG_MMAP:
            raise BarError(f"BAR{index} cannot be memory-mapped through VFIO (size {size:#x})")
        return MappedBar(self.device, size, offset, f"BAR{index} (VFIO)")

    def map_dma(self, vaddr: int, size: int) -> int:
        """Map [vaddr, vaddr + size) of this process for the card's reads and writes; returns the IOVA."""
        size = -(-size // PAGE) * PAGE
        iova = self._next_iova
        req = DMA_MAP.pack(DMA_MAP.size, VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE, vaddr, iova, size)
        _ioctl(self.container, VFIO_IOMMU_MAP_DMA, req, f"DMA map of {size:#x} bytes")
        self._next_iova += size + PAGE  # an unmapped page between mappings catches overruns
        self._maps[iova] = size
        return iova

    def unmap_dma(self, iova: int) -> None:
        size = self._maps.pop(iova)
        _ioctl(self.container, VFIO_IOMMU_UNMAP_DMA, DMA_UNMAP.pack(DMA_UNMAP.size, 0, iova, size), "DMA unmap")

    def close(self) -> None:
        for fd in (self.device, self.group, self.container):
            if fd >= 0:
                os.close(fd)
        self.device = self.group = self.container = -1
