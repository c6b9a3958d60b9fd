"""The engine core on a board without PCIe (fpga/cores/engine_core.py), driven as a `Backend` through the
UART bridge: the card backend's register programs run over the link, and the board's on-chip RAM (which the
engine sees as host memory, bus addresses 0..) holds the buffers, read and written through the bridge.

Everything is 32-bit words at UART speed, so this proves function, not throughput; the same code runs
against the board design simulated (sim/board.py) with a `tcp://` link.
"""

from __future__ import annotations

import struct

from driver.abi import WINDOW_BASE, Resp, bar_bytes
from driver.backend import Buffer, NotGpuReachable
from driver.bar import Bar
from driver.card import CardBackend, CardError
from fpga.link.bridge_protocol import BridgeError
from fpga.link.serial_link import SerialLink

RAM_BASE = 0x8000_0000  # where the bridge shows the on-chip RAM (fpga/cores/engine_core.py)
RAM_ALIGN = 64  # buffers start on a 64-byte boundary of the RAM
MAX_RAM_BYTES = 1 << 30


class LinkBar(Bar):
    """The engine's registers and submission windows at bridge addresses 0.. (not memory-mapped: no GPU)."""

    def __init__(self, link: SerialLink, size: int = WINDOW_BASE):
        self.link, self.size = link, size

    def read32(self, offset: int) -> int:
        self.check(offset)
        return self.link.read32(offset)

    def write32(self, offset: int, value: int) -> None:
        self.check(offset)
        self.link.write32(offset, value)


class BoardBuffer(Buffer):
    """A piece of the board's RAM at bus address `addr`; bytes go through the bridge a 32-bit word at a time
    (a partial word is read, merged and written back)."""

    placement = "host"

    def __init__(self, ram: BoardRam, addr: int, size: int):
        self.ram, self.addr, self.size = ram, addr, size

    def read(self, offset: int, length: int) -> bytes:
        self._check(offset, length)
        start, end = self.addr + offset, self.addr + offset + length
        first, last = start & ~3, (end + 3) & ~3
        words = b"".join(struct.pack("<I", self.ram.link.read32(RAM_BASE + a)) for a in range(first, last, 4))
        return words[start - first : end - first]

    def write(self, offset: int, data: bytes) -> None:
        self._check(offset, len(data))
        start, end = self.addr + offset, self.addr + offset + len(data)
        if start == end:
            return
        first, last = start & ~3, (end + 3) & ~3
        words = bytearray(last - first)
        if start != first:
            words[:4] = struct.pack("<I", self.ram.link.read32(RAM_BASE + first))
        if end != last:
            words[-4:] = struct.pack("<I", self.ram.link.read32(RAM_BASE + last - 4))
        words[start - first : end - first] = data
        for i, (word,) in enumerate(struct.iter_unpack("<I", words)):
            self.ram.link.write32(RAM_BASE + first + 4 * i, word)

    def free(self) -> None:
        self.ram.release(self)


class BoardRam:
    """The on-chip RAM as the card's memory: buffers handed out first fit, and addresses past its end, where the
    engine's reads and writes answer DECERR (its bus-error path), as unbacked memory."""

    def __init__(self, link: SerialLink, ram_bytes: int):
        self.link, self.ram_bytes = link, ram_bytes
        self.buffers: list[BoardBuffer] = []

    def alloc(self, size: int, placement: str) -> Buffer:
        at = 0
        for b in sorted(self.buffers, key=lambda b: b.addr):
            if b.addr - at >= size:
                break
            at = -(-(b.addr + b.size) // RAM_ALIGN) * RAM_ALIGN
        if at + size > self.ram_bytes:
            used = sum(b.size for b in self.buffers)
            raise CardError(f"the board's RAM cannot hold {size:,} more bytes ({self.ram_bytes:,} bytes, {used:,} "
                            f"in {len(self.buffers)} buffers): free some, or build the core with a larger --ram-kib")
        buf = BoardBuffer(self, at, size)
        self.buffers.append(buf)
        return buf

    def release(self, buffer: BoardBuffer) -> None:
        self.buffers = [b for b in self.buffers if b is not buffer]

    def unbacked_address(self, size: int) -> int:
        return -(-self.ram_bytes // 4096) * 4096

    def close(self) -> None:
        self.buffers.clear()


def ram_bytes(link: SerialLink) -> int:
    """The RAM's size, found by reading: the highest power-of-two boundary below which words still answer."""

    def backed(size: int) -> bool:
        try:
            link.read32(RAM_BASE + size - 4)
            return True
        except BridgeError as exc:
            if Resp.DECERR.name in str(exc):
                return False
            raise

    if not backed(4):
        raise CardError("the bridge answers nothing at the RAM's base (0x80000000): is this the engine core?")
    size = 4
    while size < MAX_RAM_BYTES and backed(size * 2):
        size *= 2
    return size


class BoardBackend(CardBackend):
    """The engine core behind a UART bridge (a board, or its design simulated)."""

    name = "card-uart"
    # The engine's bus memory is the board's RAM: a region past it answers DECERR and touches nothing else.
    modelled_memory = True

    def __init__(self, link: SerialLink, *, timeout: float = 5.0, on_close=None):
        self.link = link
        super().__init__(LinkBar(link), BoardRam(link, ram_bytes(link)), timeout=timeout, on_close=on_close)
        self.bar.size = bar_bytes(self.geometry.num_queues, self.geometry.slots)

    def queue_pointers(self, queue: int):
        raise NotGpuReachable("the board's engine sits behind a UART bridge, not on PCIe: GPU code cannot reach "
                              "its queues (use a PCIe card, or software-cuda on a GPU machine)")

    def gpu_address(self, buffer: Buffer) -> int:
        raise NotGpuReachable("the board's RAM is on the FPGA, out of any GPU's reach (the board has no PCIe)")


def check_geometry(backend: BoardBackend, num_queues: int | None = None, slots: int | None = None,
                   num_regions: int | None = None) -> None:
    """Refuse work for another geometry than the one the board's engine was built with."""
    g = backend.geometry
    asked = {"num_queues": num_queues, "slots": slots, "num_regions": num_regions}
    wrong = {k: v for k, v in asked.items() if v is not None and v != getattr(g, k)}
    if wrong:
        have = {k: getattr(g, k) for k in asked}
        raise CardError(f"the board's engine was built with {have}, not {wrong}: rebuild the bitstream with those "
                        "(arkdma fpga build --num-queues/--slots/--num-regions)")


def play_scenarios(link: SerialLink, scenarios) -> dict:
    """Conformance scenarios one after another on the board behind `link`, the engine reset and the RAM
    handed out afresh before each; {name: Outcome}."""
    from driver import player

    outcomes = {}
    for sc in scenarios:
        backend = BoardBackend(link)
        try:
            check_geometry(backend, sc.num_queues, sc.slots, sc.num_regions)
            backend.reset()
            outcomes[sc.name] = player.run(player.play_scenario(sc), player.BackendPort(backend))
        finally:
            backend.close()
    return outcomes


LOOPBACK_BYTES = 1021  # odd, so both ends sit off the bus word and the engine realigns


def loopback(link: SerialLink, nbytes: int = LOOPBACK_BYTES) -> dict:
    """One copy through the engine from board RAM to board RAM, off the bus word at both ends, between guard
    bytes; the bytes, the guards and the completion word checked. What `arkdma fpga probe --dma` runs."""
    import time

    from driver.abi import Flag, Perm
    from driver.descriptor import Descriptor
    from driver.device import Device

    t_start = time.monotonic()
    backend = BoardBackend(link)
    try:
        backend.reset()
        dev = Device(backend)
        pattern = bytes((i * 37 + 11) & 0xFF for i in range(nbytes))
        src, dst = dev.alloc(nbytes + 3), dev.alloc(nbytes + 16)
        src.write(0, b"\x00\x00\x00" + pattern)
        dst.write(0, b"\xA5" * (nbytes + 16))
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = dev.queue()
        t0 = time.monotonic()
        ticket = q.post(Descriptor(rs.id, 3, rd.id, 5, nbytes, flags=Flag.NOTIFY))
        q.wait(ticket, timeout=60.0)
        seconds = time.monotonic() - t0
        got = dst.read(0, nbytes + 16)
        want = b"\xA5" * 5 + pattern + b"\xA5" * 11
        if got != want:
            first = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
            raise CardError(f"loopback DMA: byte {first} of the destination is {got[first]:#04x}, not "
                            f"{want[first]:#04x}: the engine or the board's RAM is not right")
        return {"bytes": nbytes, "completed": q.completed, "dma_seconds": round(seconds, 3),
                "total_seconds": round(time.monotonic() - t_start, 3)}
    finally:
        backend.close()
