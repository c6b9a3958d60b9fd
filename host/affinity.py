"""Which CPUs sit near a GPU (its PCI device's local_cpulist in sysfs), for pinning the engine thread."""

from __future__ import annotations

import os
from pathlib import Path

SYSFS_PCI = Path("/sys/bus/pci/devices")


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]; ValueError on anything else."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"not a CPU list: {text!r}")
        cpus.extend(range(int(lo), int(hi if sep else lo) + 1))
    return cpus


def cpus_near(pci_bus_id: str, sysfs: Path = SYSFS_PCI) -> list[int]:
    """CPUs local to the PCI device (as CUDA names it, e.g. '0000:1A:00.0') that this process may use;
    every allowed CPU when sysfs does not say."""
    allowed = sorted(os.sched_getaffinity(0))
    path = sysfs / pci_bus_id.lower() / "local_cpulist"
    try:
        local = set(parse_cpulist(path.read_text()))
    except (OSError, ValueError):
        return allowed
    near = [c for c in allowed if c in local]
    return near or allowed
