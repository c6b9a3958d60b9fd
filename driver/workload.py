"""The standard DMA workload behind `arkdma demo`: back-to-back copies of one size, every byte checked."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from driver.abi import Flag
from driver.dtypes import DESCRIPTOR_DTYPE

GUARD = 64  # bytes of guard pattern on each side of every destination
GUARD_BYTE = 0xA5


@dataclass(frozen=True)
class WorkloadSpec:
    sizes: tuple[int, ...] = (64, 1024, 4096, 65536, 1 << 20)
    bytes_per_size: int = 4 << 20
    max_descriptors: int = 1024
    seed: int = 1

    def __post_init__(self) -> None:
        if not self.sizes or any(not 0 < s <= 1 << 30 for s in self.sizes):
            raise ValueError(f"workload sizes must be 1 byte .. 1 GiB each, not {self.sizes}")
        if self.bytes_per_size <= 0 or self.max_descriptors <= 0:
            raise ValueError("bytes_per_size and max_descriptors must be positive")

    def descriptors_for(self, size: int) -> int:
        return max(1, min(self.max_descriptors, self.bytes_per_size // size))

    def total_bytes(self) -> int:
        return sum(size * self.descriptors_for(size) for size in self.sizes)


@dataclass(frozen=True)
class WorkloadRow:
    bytes: int  # per descriptor
    descriptors: int
    seconds: float  # from the first doorbell to the last completion
    timebase: str  # "wall clock", "simulated clock", "GPU events"
    verified: bool  # every destination byte equals its source, every guard byte untouched

    @property
    def us_per_descriptor(self) -> float:
        return self.seconds / self.descriptors * 1e6

    @property
    def gbps(self) -> float:
        return self.bytes * self.descriptors / self.seconds / 1e9 if self.seconds > 0 else float("inf")

    def as_dict(self) -> dict:
        return {**asdict(self), "us_per_descriptor": self.us_per_descriptor, "gbps": self.gbps}


@dataclass
class WorkloadResult:
    engine: str
    rows: list[WorkloadRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return bool(self.rows) and all(r.verified for r in self.rows)


def descriptor_stream(n: int, size: int, src_region: int, dst_region: int, dst_offset: int = 0) -> np.ndarray:
    """n copies of `size` bytes, chunk i of the source to chunk i of the destination; NOTIFY on the last."""
    d = np.zeros(n, DESCRIPTOR_DTYPE)
    idx = np.arange(n, dtype=np.uint64)
    d["src_region"], d["dst_region"] = src_region, dst_region
    d["src_offset"] = idx * size
    d["dst_offset"] = dst_offset + idx * size
    d["length"] = size
    d["cookie"] = idx
    d["flags"][-1] = Flag.NOTIFY
    return d
