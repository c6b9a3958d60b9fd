"""The card-uart backend's own parts without a simulator: buffers in the board's RAM read and written a word at a
time through the bridge (any alignment, neighbours untouched), the RAM handed out and found by reading, the
registers through a LinkBar onto the fake card, and the refusals (GPU, geometry, RAM full, out of range)."""

from __future__ import annotations

import random

import pytest

from driver.abi import Resp
from driver.backend import NotGpuReachable
from driver.card import CardError
from driver.reference_engine import ReferenceEngine
from fpga.link.board import RAM_ALIGN, RAM_BASE, BoardBackend, BoardRam, check_geometry, ram_bytes
from fpga.link.bridge_protocol import BridgeError
from tests.driver.fake_card import FakeCardBar


class FakeLink:
    """The bridge's address map: the fake card's registers and windows below RAM_BASE, `ram` bytes of RAM from
    RAM_BASE, DECERR anywhere else (as fpga/cores/engine_core.py decodes it)."""

    def __init__(self, ram: int, engine: ReferenceEngine | None = None):
        self.ram = bytearray(ram)
        self.bar = FakeCardBar(engine or ReferenceEngine(4, 16, 8))
        self.frames = 0

    def _ram_offset(self, addr: int) -> int:
        if addr % 4 or not RAM_BASE <= addr < RAM_BASE + len(self.ram):
            raise BridgeError(f"reading {addr:#010x} answered {Resp.DECERR.name}")
        return addr - RAM_BASE

    def read32(self, addr: int) -> int:
        self.frames += 1
        if addr < RAM_BASE:
            return self.bar.read32(addr)
        at = self._ram_offset(addr)
        return int.from_bytes(self.ram[at : at + 4], "little")

    def write32(self, addr: int, value: int) -> None:
        self.frames += 1
        if addr < RAM_BASE:
            return self.bar.write32(addr, value)
        at = self._ram_offset(addr)
        self.ram[at : at + 4] = value.to_bytes(4, "little")


@pytest.mark.parametrize("seed", range(3))
def test_buffer_bytes_at_any_alignment_leave_neighbours_alone(seed):
    rng = random.Random(seed)
    link = FakeLink(4096)
    link.ram[:] = bytes(rng.randrange(256) for _ in range(4096))
    shadow = bytearray(link.ram)
    ram = BoardRam(link, 4096)
    a, b = ram.alloc(1001, "host"), ram.alloc(77, "device")
    assert a.addr == 0 and b.addr == 1024  # 64-byte aligned, first fit
    for _ in range(200):
        buf = rng.choice([a, b])
        offset = rng.randrange(buf.size + 1)
        length = rng.randrange(buf.size - offset + 1)
        data = bytes(rng.randrange(256) for _ in range(length))
        buf.write(offset, data)
        shadow[buf.addr + offset : buf.addr + offset + length] = data
        assert link.ram == shadow, "a write touched bytes outside its range"
        o2 = rng.randrange(buf.size + 1)
        l2 = rng.randrange(buf.size - o2 + 1)
        assert buf.read(o2, l2) == bytes(shadow[buf.addr + o2 : buf.addr + o2 + l2])


def test_buffers_refuse_out_of_range_and_bad_types():
    buf = BoardRam(FakeLink(1024), 1024).alloc(100, "host")
    for offset, length in ((-1, 4), (0, 101), (97, 4), (100, 1)):
        with pytest.raises(ValueError, match="outside a buffer of 100 bytes"):
            buf.read(offset, length)
        with pytest.raises(ValueError, match="outside a buffer of 100 bytes"):
            buf.write(offset, bytes(length))
    with pytest.raises(TypeError, match="must be an int"):
        buf.read(1.0, 4)
    assert buf.read(100, 0) == b"" and buf.write(100, b"") is None


def test_ram_runs_out_with_a_clear_error_and_freed_space_comes_back():
    ram = BoardRam(FakeLink(4096), 4096)
    first, second = ram.alloc(2000, "host"), ram.alloc(2000, "host")
    with pytest.raises(CardError, match=r"cannot hold 100 more bytes \(4,096 bytes, 4,000 in 2 buffers\).*--ram-kib"):
        ram.alloc(100, "host")
    first.free()
    again = ram.alloc(1500, "host")
    assert again.addr == 0 and second.addr == 2048
    assert ram.unbacked_address(64) >= 4096


def test_ram_size_is_found_by_reading():
    assert ram_bytes(FakeLink(256 * 1024)) == 256 * 1024
    assert ram_bytes(FakeLink(48 * 1024)) == 32 * 1024  # only whole powers of two are claimed
    with pytest.raises(CardError, match="answers nothing at the RAM's base"):
        ram_bytes(FakeLink(0))


def test_backend_over_the_link_plays_registers_and_refuses_the_gpu():
    engine = ReferenceEngine(4, 16, 8)
    link = FakeLink(8192, engine)
    with BoardBackend(link) as backend:
        assert backend.name == "card-uart" and backend.geometry.num_queues == 4 and backend.memory.ram_bytes == 8192
        assert backend.bar.size == link.bar.size
        buf = backend.alloc(256)
        assert buf.addr % RAM_ALIGN == 0 and backend.owns(buf)
        backend.set_region(2, buf.addr, 256, 3)
        assert link.bar.regs, "the region went to the registers through the link"
        with pytest.raises(NotGpuReachable, match="UART bridge"):
            backend.queue_pointers(0)
        with pytest.raises(NotGpuReachable, match="out of any GPU's reach"):
            backend.gpu_address(buf)
        with pytest.raises(ValueError, match="placement"):
            backend.alloc(64, "gpu")
        with pytest.raises(ValueError, match="buffer size"):
            backend.alloc(0)
        check_geometry(backend, 4, 16, 8)
        with pytest.raises(CardError, match=r"built with .*'slots': 16.*not \{'slots': 32\}.*--slots"):
            check_geometry(backend, slots=32)
        with pytest.raises(Exception, match="outside"):
            backend.bar.read32(backend.bar.size)
