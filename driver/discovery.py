"""Finds what this machine has: CUDA GPUs (through CuPy) and arkdma cards (PCI ids through sysfs)."""

from __future__ import annotations

import ctypes

from dataclasses import dataclass
from pathlib import Path

# PCI ids an arkdma card answers with: the Xilinx/AMD and Lattice vendor ids with arkdma's device id.
ARKDMA_PCI_DEVICE_ID = 0xA4D0
ARKDMA_PCI_IDS = ((0x10EE, ARKDMA_PCI_DEVICE_ID), (0x1204, ARKDMA_PCI_DEVICE_ID))
SYSFS_PCI = Path("/sys/bus/pci/devices")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_bytes: int
    pci_bus_id: str


@dataclass(frozen=True)
class PciCard:
    address: str  # domain:bus:device.function
    vendor: int
    device: int
    sysfs: Path


def nvidia_driver_missing() -> str | None:
    """Why no NVIDIA driver is here (libcuda cannot be loaded), or None. Without this check CUDA's runtime
    reports a missing driver as "driver version is insufficient", which sends people looking for updates."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver or GPU (libcuda.so.1, the NVIDIA driver's library, is not installed)"
    return None


def gpus() -> tuple[list[Gpu], str]:
    """The CUDA GPUs CuPy can see, and, when there are none, why."""
    missing = nvidia_driver_missing()
    if missing:
        return [], missing
    try:
        import cupy
    except ImportError:
        return [], "CuPy is not installed (pip install 'arkdma[gpu]')"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        return [], f"the NVIDIA driver is here but CUDA cannot use it ({exc})"
    found = []
    for i in range(count):
        props = cupy.cuda.runtime.getDeviceProperties(i)
        bus = cupy.cuda.runtime.deviceGetPCIBusId(i)
        found.append(Gpu(i, props["name"].decode(), props["totalGlobalMem"], bus))
    return found, "" if found else "CUDA reports no GPU"


def cards(sysfs: Path = SYSFS_PCI) -> tuple[list[PciCard], str]:
    """arkdma cards on the PCI bus, and, when there are none, why."""
    if not sysfs.is_dir():
        return [], f"{sysfs} does not exist (not Linux, or sysfs not mounted)"
    found = []
    for dev in sorted(sysfs.iterdir()):
        try:
            vendor = int((dev / "vendor").read_text(), 16)
            device = int((dev / "device").read_text(), 16)
        except (OSError, ValueError):
            continue
        if (vendor, device) in ARKDMA_PCI_IDS:
            found.append(PciCard(dev.name, vendor, device, dev))
    ids = ", ".join(f"{v:04x}:{d:04x}" for v, d in ARKDMA_PCI_IDS)
    return found, "" if found else f"no PCI device with an arkdma id ({ids})"
