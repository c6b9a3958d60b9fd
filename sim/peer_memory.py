"""A second PCIe endpoint standing in for a GPU's memory, on its own root port beside the card: its memory is a
64-bit prefetchable BAR (cocotbext-pcie's MemoryEndpoint), and every request it receives and every completion
it sends is logged, so a test can tell peer-to-peer traffic from traffic through host memory.

A second, larger prefetchable BAR (as a GPU's BAR3 beside its memory aperture) is aligned to its size when the
root complex assigns addresses, which leaves a hole after the memory BAR inside the root port's window: a
request there is routed to this device, matches no BAR, and is answered Unsupported Request by the device."""

from __future__ import annotations

from dataclasses import dataclass

from cocotbext.pcie.core import Device, MemoryEndpoint
from cocotbext.pcie.core.tlp import CplStatus, TlpType

MEMORY_BAR = 0  # BAR0/1: the memory the card copies to and from
APERTURE_BAR = 2  # BAR2/3: only there to leave the hole
DISPLAY_3D_CONTROLLER = 0x030200  # the class code a compute GPU reports

_REQUESTS = {TlpType.MEM_READ: "read", TlpType.MEM_READ_64: "read",
             TlpType.MEM_WRITE: "write", TlpType.MEM_WRITE_64: "write"}


@dataclass(frozen=True)
class Request:
    kind: str  # "read" or "write"
    address: int
    dwords: int
    requester: str  # bus:device.function


class LoggedDevice(Device):
    """A cocotbext-pcie Device that keeps the memory requests it receives and counts the completions it sends,
    by status."""

    def __init__(self, *args, **kwargs):
        self.requests: list[Request] = []
        self.completions: dict[str, int] = {}
        super().__init__(*args, **kwargs)

    async def upstream_recv(self, tlp):
        kind = _REQUESTS.get(tlp.fmt_type)
        if kind:
            self.requests.append(Request(kind, tlp.address, tlp.length, str(tlp.requester_id)))
        await super().upstream_recv(tlp)

    async def upstream_send(self, tlp):
        if tlp.is_completion():
            name = CplStatus(tlp.status).name
            self.completions[name] = self.completions.get(name, 0) + 1
        await super().upstream_send(tlp)


class PeerMemory:
    """The GPU's memory as a peer of the card: `memory` holds the BAR's bytes (read and written directly by the
    test, as a GPU kernel would), `base` is the BAR's bus address once the root complex has enumerated."""

    def __init__(self, rc, memory_bytes: int = 4 << 20, aperture_bytes: int = 8 << 20):
        for name, size in (("memory_bytes", memory_bytes), ("aperture_bytes", aperture_bytes)):
            if size < 1 << 20 or size & (size - 1):
                raise ValueError(f"{name} must be a power of two of at least 1 MiB, not {size}")
        if aperture_bytes <= memory_bytes:
            raise ValueError(f"aperture_bytes ({aperture_bytes}) must exceed memory_bytes ({memory_bytes}), "
                             "or no hole is left after the memory BAR")
        self.function = MemoryEndpoint()
        self.function.class_code = DISPLAY_3D_CONTROLLER
        self.function.log.setLevel("WARNING")
        self.memory = self.function.add_prefetchable_mem_region(memory_bytes)
        self.function.add_prefetchable_mem_region(aperture_bytes)
        self.memory_bytes, self.aperture_bytes = memory_bytes, aperture_bytes
        self.device = LoggedDevice(self.function)
        self.device.log.setLevel("WARNING")
        self.rc = rc
        rc.make_port().connect(self.device)
        self.base: int | None = None

    def open(self) -> None:
        """Take the BAR addresses the root complex assigned (call after rc.enumerate())."""
        found = self.rc.find_device(self.function.pcie_id)
        self.base = found.bar_addr[MEMORY_BAR]
        aperture = found.bar_addr[APERTURE_BAR]
        if aperture < self.base + self.memory_bytes + 4096:
            raise RuntimeError(f"no hole after the memory BAR: memory at {self.base:#x} + {self.memory_bytes:#x}, "
                               f"aperture at {aperture:#x}")
        self.hole = self.base + self.memory_bytes  # in the root port's window, in no BAR
        self.aperture = aperture

    def contains(self, addr: int) -> bool:
        return self.base is not None and self.base <= addr < self.aperture + self.aperture_bytes

    def read(self, offset: int, length: int) -> bytes:
        return bytes(self.memory[offset:offset + length])

    def write(self, offset: int, data: bytes) -> None:
        self.memory[offset:offset + len(data)] = data
