"""`arkdma fpga probe --pcie` without a card: a fake sysfs tree (link, BAR0 file, driver, IOMMU group) and, for the
DMA steps, the register-level stand-in of tests/driver/fake_card.py with the reference engine behind it."""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest

from driver import card_probe
from driver.abi import (ABI_VERSION_MINOR, DEVICE_MAGIC, GLOBAL, QUEUE, WINDOW_BASE, Capability, bar_bytes,
                        version_word, window_stride)
from driver.card_probe import DST_OFFSET, OpenedCard, probe
from driver.discovery import ARKDMA_PCI_DEVICE_ID, Gpu
from driver.reference_engine import ReferenceEngine
from tests.driver.fake_card import FakeCardBar

GEN3 = "8.0 GT/s PCIe"
NO_GPU = lambda: ([], "no NVIDIA driver (test)")  # noqa: E731
A_GPU = lambda: ([Gpu(0, "NVIDIA H100 80GB HBM3", 80 << 30, "0000:1b:00.0")], "")  # noqa: E731


def add_device(root: Path, address: str = "0000:65:00.0", *, ids=(0x10EE, ARKDMA_PCI_DEVICE_ID),
               size: int = bar_bytes(4, 16), link=(GEN3, 8, GEN3, 8), driver: str | None = "vfio-pci",
               iommu_group: int | None = 12, version: int = version_word(), enabled: bool = True) -> Path:
    """A PCI device folder as sysfs shows it, BAR0 a file holding the engine's identity registers."""
    dev = root / address
    dev.mkdir(parents=True)
    (dev / "vendor").write_text(f"{ids[0]:#06x}\n")
    (dev / "device").write_text(f"{ids[1]:#06x}\n")
    (dev / "resource").write_text(f"0x00000000f0000000 {0xF0000000 + size - 1:#018x} 0x0000000000040200\n")
    for name, value in zip(("current_link_speed", "current_link_width", "max_link_speed", "max_link_width"), link):
        (dev / name).write_text(f"{value}\n")
    (dev / "enable").write_text("1\n" if enabled else "0\n")
    data = bytearray(size)
    for name, value in (("ID", DEVICE_MAGIC), ("VERSION", version), ("CAPS", 7), ("NUM_QUEUES", 4), ("SLOTS", 16),
                        ("NUM_REGIONS", 8), ("DATA_BYTES", 8), ("WINDOW_BASE", WINDOW_BASE),
                        ("WINDOW_STRIDE", window_stride(16))):
        struct.pack_into("<I", data, GLOBAL.address(name), value)
    (dev / "resource0").write_bytes(data)
    if driver:
        (root.parent / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        (dev / "driver").symlink_to(root.parent / "drivers" / driver)
    if iommu_group is not None:
        (root.parent / "groups" / str(iommu_group)).mkdir(parents=True, exist_ok=True)
        (dev / "iommu_group").symlink_to(root.parent / "groups" / str(iommu_group))
    return dev


@pytest.fixture
def sysfs(tmp_path) -> Path:
    root = tmp_path / "devices"
    root.mkdir()
    return root


class EngineMemory:
    """The reference engine's bus memory as the card's DMA memory (VfioMemory's part on a real card)."""

    def __init__(self, engine: ReferenceEngine, device_placement: bool = False, flip_at: int | None = None):
        self.engine, self.device_placement, self.flip_at = engine, device_placement, flip_at
        self.buffers = []
        self.closed = False

    def alloc(self, size: int, placement: str):
        buf = self.engine.alloc(size, "host")
        if placement == "device" and self.device_placement:
            buf.placement = "device"
        if self.flip_at is not None and size > 64:  # not the completion words
            read, flip = buf.read, self.flip_at

            def flipped(offset, length):
                data = bytearray(read(offset, length))
                if offset <= flip < offset + length:
                    data[flip - offset] ^= 0xFF
                return bytes(data)

            buf.read = flipped
        self.buffers.append(buf)
        return buf

    def close(self) -> None:
        self.closed = True
        self.engine.close()


class DeafBar(FakeCardBar):
    """Takes doorbells into its register but never hands them to the engine: no completion ever comes."""

    def write32(self, offset: int, value: int) -> None:
        if any(offset == QUEUE.address("DOORBELL", q) for q in range(self.engine.geometry.num_queues)):
            self.writes.append((offset, value))
            self.regs[offset] = value
            return
        super().write32(offset, value)


def fake_opener(bar_class=FakeCardBar, **memory_options):
    opened = []

    def opener(card, method):
        engine = ReferenceEngine(4, 16, 8)
        memory = EngineMemory(engine, **memory_options)
        opened.append(memory)
        return OpenedCard(bar_class(engine), memory, "vfio")

    opener.opened = opened
    return opener


def statuses(report) -> dict[str, str]:
    return {s.name: s.status for s in report.steps}


def step(report, name):
    return next(s for s in report.steps if s.name == name)


# --- the whole probe passing ------------------------------------------------------------------------

def test_listing_registers_and_loopback(sysfs):
    add_device(sysfs, link=("5.0 GT/s PCIe", 4, GEN3, 8))
    add_device(sysfs, "0000:17:00.0", ids=(0x10DE, 0x2330))  # a GPU: not listed
    opener = fake_opener()
    seen = []
    report = probe(sysfs=sysfs, opener=opener, find_gpus=NO_GPU, nbytes=4096, on_step=seen.append)
    assert statuses(report) == {"find": "ok", "link": "ok", "open": "ok", "registers": "ok", "loopback": "ok",
                                "gpu-bar": "skipped", "peer": "skipped"}
    assert report.ok and seen == report.steps
    (card,) = report.cards
    assert (card.address, card.ids, card.bar0_bytes, card.driver, card.iommu_group) == \
        ("0000:65:00.0", f"10ee:{ARKDMA_PCI_DEVICE_ID:04x}", bar_bytes(4, 16), "vfio-pci", 12)
    link = step(report, "link")
    assert link.summary == f"5.0 GT/s PCIe x4 (maximum {GEN3} x8): below the maximum" and "slot" in link.hint
    regs = step(report, "registers").data
    engine_caps = ReferenceEngine(4, 16, 8).geometry.caps
    assert regs["registers"]["ID"] == DEVICE_MAGIC and regs["abi"] == f"1.{ABI_VERSION_MINOR}"
    assert regs["caps"] == [c.name for c in Capability if c in engine_caps]
    assert regs["geometry"] == {"num_queues": 4, "slots": 16, "num_regions": 8, "data_bytes": 0}
    copies = step(report, "loopback").data["copies"]
    assert [c["bytes"] for c in copies] == [61, 4096] and all(c["seconds"] > 0 for c in copies)
    assert "no CUDA GPU here" in step(report, "peer").summary
    assert opener.opened[0].closed  # the backend was closed, its memory with it
    json.dumps(report.as_dict())  # every step is JSON-able


def test_a_wrong_byte_in_the_copy_fails_the_loopback(sysfs):
    add_device(sysfs)
    report = probe(sysfs=sysfs, opener=fake_opener(flip_at=DST_OFFSET + 61), find_gpus=NO_GPU, nbytes=4096)
    loop = step(report, "loopback")
    assert loop.status == "FAILED" and not report.ok
    assert "the guard after the copy (destination offset 66) is 0x5a, not 0xa5" in loop.summary


# --- which card ------------------------------------------------------------------------------------

def test_no_card_says_what_is_there(sysfs):
    add_device(sysfs, "0000:17:00.0", ids=(0x10DE, 0x2330))
    add_device(sysfs, "0000:65:00.0", ids=(0x10EE, 0x5004))  # the factory shell's id
    report = probe(sysfs=sysfs, opener=fake_opener(), find_gpus=NO_GPU)
    find = step(report, "find")
    assert find.status == "FAILED" and "no arkdma card" in find.summary
    assert "0000:65:00.0 (10ee:5004)" in find.summary and "wrong ids" in find.hint
    assert set(statuses(report).values()) == {"FAILED", "skipped"} and not report.ok


def test_no_sysfs_at_all(tmp_path):
    report = probe(sysfs=tmp_path / "missing", find_gpus=NO_GPU)
    assert step(report, "find").status == "FAILED" and "does not exist" in step(report, "find").summary


def test_two_cards_need_a_device(sysfs):
    add_device(sysfs, "0000:65:00.0")
    add_device(sysfs, "0000:b3:00.0", iommu_group=40)
    report = probe(sysfs=sysfs, opener=fake_opener(), find_gpus=NO_GPU)
    find = step(report, "find")
    assert find.status == "FAILED" and "2 arkdma cards (0000:65:00.0, 0000:b3:00.0)" in find.summary
    assert [c["address"] for c in find.data["cards"]] == ["0000:65:00.0", "0000:b3:00.0"]
    report = probe("b3:00.0", sysfs=sysfs, opener=fake_opener(), find_gpus=NO_GPU, nbytes=256)
    assert report.ok and report.selected == "0000:b3:00.0"


@pytest.mark.parametrize("device, message", [
    ("0000:99:00.0", "no PCI device 0000:99:00.0 .*the arkdma cards here: 0000:65:00.0"),
    ("17:00.0", "0000:17:00.0 is 10de:2330, not an arkdma card"),
    ("card0", "'card0' is not a PCI address"),
])
def test_an_unknown_device_is_refused(sysfs, device, message):
    add_device(sysfs)
    add_device(sysfs, "0000:17:00.0", ids=(0x10DE, 0x2330))
    report = probe(device, sysfs=sysfs, opener=fake_opener(), find_gpus=NO_GPU)
    find = step(report, "find")
    assert find.status == "FAILED"
    assert __import__("re").search(message, find.summary), find.summary


# --- link, BAR, registers ----------------------------------------------------------------------------

def test_link_down(sysfs):
    add_device(sysfs, link=("Unknown", 0, GEN3, 8))
    report = probe(sysfs=sysfs, opener=fake_opener(), find_gpus=NO_GPU)
    assert step(report, "link").status == "FAILED" and "link down" in step(report, "link").summary
    assert statuses(report)["open"] == "skipped"


def test_the_real_sysfs_mapping_reads_registers_but_gives_no_dma(sysfs):
    add_device(sysfs, driver=None)
    report = probe(sysfs=sysfs, find_gpus=NO_GPU, timeout=0.5)
    assert step(report, "open").data["method"] == "sysfs"
    regs = step(report, "registers")
    assert regs.status == "ok" and regs.data["registers"]["CAPS"] == 7
    assert regs.data["caps"] == ["NOTIFY", "FENCE", "IMM"]
    assert regs.data["geometry"]["data_bytes"] == 8 and "64-bit datapath" in regs.summary
    loop = step(report, "loopback")
    assert loop.status == "FAILED" and "vfio-pci" in loop.hint and not report.ok


def test_a_wrong_abi_version_stops_before_dma(sysfs):
    add_device(sysfs, driver=None, version=2 << 16 | 3)
    report = probe(sysfs=sysfs, find_gpus=NO_GPU)
    regs = step(report, "registers")
    assert regs.status == "FAILED" and "ABI 2.x" in regs.summary and "wrong ABI version" in regs.hint
    assert regs.data["abi"] == "2.3"
    assert statuses(report)["loopback"] == "skipped"


def test_a_bar_without_permission(sysfs, monkeypatch):
    add_device(sysfs, driver=None)
    real_open = os.open

    def refuse(path, flags, *rest):
        if str(path).endswith("resource0"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *rest)

    monkeypatch.setattr(os, "open", refuse)
    report = probe(sysfs=sysfs, find_gpus=NO_GPU)
    opened = step(report, "open")
    assert opened.status == "FAILED" and "no permission to open" in opened.summary and "permission" in opened.hint
    assert statuses(report)["registers"] == "skipped"


@pytest.mark.parametrize("broken, message", [("disabled", "is disabled"), ("unassigned", "BAR0 is not assigned")])
def test_a_disabled_or_unassigned_bar(sysfs, broken, message):
    dev = add_device(sysfs, driver=None, enabled=broken != "disabled")
    if broken == "unassigned":
        (dev / "resource").write_text("0x0 0x0 0x0\n")
    report = probe(sysfs=sysfs, find_gpus=NO_GPU)
    opened = step(report, "open")
    assert opened.status == "FAILED" and message in opened.summary and "BAR disabled" in opened.hint
    if broken == "unassigned":
        assert report.cards[0].bar0_bytes is None and "not assigned" in report.cards[0].bar0_problem


def test_a_card_that_left_the_bus_reads_all_ones(sysfs):
    dev = add_device(sysfs, driver=None)
    (dev / "resource0").write_bytes(b"\xff" * bar_bytes(4, 16))
    regs = step(probe(sysfs=sysfs, find_gpus=NO_GPU), "registers")
    assert regs.status == "FAILED" and "0xffffffff" in regs.summary and "left the bus" in regs.hint


def test_vfio_without_an_iommu_group(sysfs):
    add_device(sysfs, iommu_group=None)
    opened = step(probe(sysfs=sysfs, find_gpus=NO_GPU), "open")
    assert opened.status == "FAILED" and "no IOMMU group" in opened.summary and opened.hint.startswith("IOMMU")


# --- DMA that does not complete, and GPUs ---------------------------------------------------------------

def test_a_loopback_that_never_completes_times_out_with_the_queue_registers(sysfs):
    add_device(sysfs)
    t0 = time.monotonic()
    report = probe(sysfs=sysfs, opener=fake_opener(DeafBar), find_gpus=NO_GPU, timeout=0.2)
    assert time.monotonic() - t0 < 10
    loop = step(report, "loopback")
    assert loop.status == "FAILED" and loop.summary.startswith("no completion") and "0.2 s" in loop.summary
    regs = loop.data["registers"]
    assert regs["queue0.DOORBELL"] == 1 and regs["queue0.COMPLETED_LO"] == 0 and regs["CONTROL"] & 1
    assert "the engine ignores doorbells" in loop.hint and not report.ok


def test_a_gpu_here_but_no_way_to_give_the_card_gpu_memory(sysfs):
    add_device(sysfs)
    report = probe(sysfs=sysfs, opener=fake_opener(), find_gpus=A_GPU, nbytes=256)
    peer = step(report, "peer")
    assert peer.status == "unsupported" and "GPU 0 NVIDIA H100 80GB HBM3 (0000:1b:00.0)" in peer.summary
    assert "gave host memory" in peer.summary and "GPUDirect RDMA" in peer.hint
    # the stand-in BAR is not memory-mapped, so GPU threads cannot be given it: a failure, not a pretence
    assert step(report, "gpu-bar").status == "FAILED" and "not memory-mapped" in step(report, "gpu-bar").summary


def test_the_peer_copy_runs_where_the_memory_is_gpu_memory(sysfs):
    add_device(sysfs)
    report = probe(sysfs=sysfs, opener=fake_opener(device_placement=True), find_gpus=A_GPU, nbytes=1000)
    peer = step(report, "peer")
    assert peer.status == "ok" and [c["bytes"] for c in peer.data["copies"]] == [61, 1000]


# --- the command ----------------------------------------------------------------------------------------

def test_the_command_prints_every_step_and_writes_json(sysfs, tmp_path, monkeypatch, capsys):
    from arkdma_cli.main import main

    add_device(sysfs)
    monkeypatch.setattr(card_probe, "open_bar", fake_opener())
    monkeypatch.setattr(card_probe, "gpus", NO_GPU)
    out_file = tmp_path / "probe.json"
    assert main(["fpga", "probe", "--pcie", "--sysfs", str(sysfs), "--bytes", "512", "--json", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert "0000:65:00.0 10ee:a4d0  link 8.0 GT/s PCIe x8" in out and "IOMMU group 12" in out
    assert f"ID                     {DEVICE_MAGIC:#010x}" in out and "probe ok" in out
    data = json.loads(out_file.read_text())
    assert data["ok"] and data["link"] == "pcie" and [s["name"] for s in data["steps"]] == \
        ["find", "link", "open", "registers", "loopback", "gpu-bar", "peer"]


def test_the_command_fails_with_a_nonzero_status(sysfs, tmp_path, monkeypatch, capsys):
    from arkdma_cli.main import main

    add_device(sysfs, driver=None)
    monkeypatch.setattr(card_probe, "gpus", NO_GPU)
    out_file = tmp_path / "probe.json"
    assert main(["fpga", "probe", "--pcie", "--sysfs", str(sysfs), "--json", str(out_file)]) == 1
    out = capsys.readouterr().out
    assert "probe FAILED at loopback" in out and "check:" in out
    steps = {s["name"]: s for s in json.loads(out_file.read_text())["steps"]}
    assert steps["registers"]["status"] == "ok" and steps["loopback"]["status"] == "FAILED"


def test_the_command_wants_one_kind_of_board(monkeypatch, capsys):
    from arkdma_cli.main import main

    monkeypatch.delenv("ARKDMA_CARD_UART", raising=False)
    assert main(["fpga", "probe"]) == 1
    assert "--pcie for a card on PCIe" in capsys.readouterr().err
    assert main(["fpga", "probe", "--pcie", "--port", "/dev/ttyUSB1"]) == 1
    assert "give one of them" in capsys.readouterr().err
    assert main(["fpga", "probe", "--device", "65:00.0", "--port", "/dev/ttyUSB1"]) == 1
    assert "add --pcie" in capsys.readouterr().err


def _status_bit(name: str) -> int:
    return next(1 << b.lsb for b in QUEUE.register("STATUS").bits if b.name == name)


@pytest.mark.parametrize("words, posted, phrase", [
    ({}, None, "never started"),
    ({"STATUS": "ENABLED|BUSY", "DOORBELL": 2}, 2, "is BUSY"),
    ({"STATUS": "ENABLED", "DOORBELL": 0}, 2, "DOORBELL reads 0x0, not the 0x2 written"),
    ({"STATUS": "ENABLED", "DOORBELL": 2, "COMPLETED_LO": 2}, 2, "never reached host memory"),
    ({"STATUS": "ENABLED", "DOORBELL": 2}, 2, "ignores doorbells"),
])
def test_a_timeout_says_what_the_queue_registers_point_at(words, posted, phrase):
    regs = {f"queue0.{r.name}": 0 for r in QUEUE.registers}
    for name, value in words.items():
        if name == "STATUS":
            value = sum(_status_bit(bit) for bit in value.split("|"))
        regs[f"queue0.{name}"] = value
    assert phrase in card_probe._timeout_hint(regs, 0, posted)
