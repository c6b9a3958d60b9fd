"""The card backend without a card: every conformance scenario through its register programs onto a
register-level stand-in (tests/driver/fake_card.py), BAR mapping of a file through a fake sysfs tree,
and the errors that say what to do (no card, no permission, no IOMMU group, wrong driver, no CUDA)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from driver import card as card_mod
from driver.abi import DEVICE_MAGIC, GLOBAL, QUEUE, REGION, WINDOW_BASE, bar_bytes, version_word, window_stride
from driver.bar import BarError, MappedBar, open_sysfs, resource_size, vfio_plan
from driver.card import CardBackend, CardError, CardProvider, NoDma
from driver.descriptor import Descriptor
from driver.discovery import ARKDMA_PCI_DEVICE_ID
from driver.errors import EngineUnavailable
from driver.player import play
from driver.reference_engine import ReferenceEngine
from tests.conformance.compare import assert_same, check_expectations
from tests.conformance.scenarios import all_scenarios
from tests.conformance.test_conformance import reference_for
from tests.driver.fake_card import FakeCardBar

SCENARIOS = all_scenarios()


def fake_card(num_queues=4, slots=16, num_regions=8) -> tuple[CardBackend, FakeCardBar]:
    engine = ReferenceEngine(num_queues, slots, num_regions)
    bar = FakeCardBar(engine)
    return CardBackend(bar, engine), bar


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_conformance_through_the_register_programs(scenario):
    engine = ReferenceEngine(scenario.num_queues, scenario.slots, scenario.num_regions)
    with CardBackend(FakeCardBar(engine), engine) as backend:
        out = play(backend, scenario)
    check_expectations(scenario, out)
    assert_same(out, reference_for(scenario, out), scenario)


def test_register_traffic_of_a_region_and_a_queue():
    backend, bar = fake_card()
    bar.writes.clear()
    backend.set_region(3, 0x1_2345_6000, 0x2_0000_0100, 3)
    assert bar.writes == [(REGION.address("ADDR_LO", 3), 0x2345_6000), (REGION.address("ADDR_HI", 3), 1),
                          (REGION.address("SIZE_LO", 3), 0x100), (REGION.address("SIZE_HI", 3), 2),
                          (REGION.address("PERMS", 3), 3)]  # PERMS last: it commits the entry
    bar.writes.clear()
    backend.write_slots(1, 15, Descriptor(1, 2, 3, 4, 5, cookie=6).pack() * 2)  # wraps from slot 15 to 0
    base = WINDOW_BASE + window_stride(16)
    assert [w[0] for w in bar.writes] == [base + 15 * 32 + 4 * i for i in range(8)] + [base + 4 * i for i in range(8)]
    backend.ring(1, (1 << 32) + 17)
    assert bar.writes[-1] == (QUEUE.address("DOORBELL", 1), 17)


def test_out_of_range_ids_are_refused_before_any_write():
    backend, bar = fake_card()
    bar.writes.clear()
    with pytest.raises(CardError, match="queue 4 does not exist"):
        backend.enable_queue(4)
    with pytest.raises(CardError, match="region 8 does not exist"):
        backend.set_region(8, 0, 1, 1)
    assert bar.writes == []


def test_a_stuck_engine_times_out_with_a_hint():
    backend, bar = fake_card()
    backend.timeout = 0.05
    bar.read32 = lambda offset: 1 << 1 if offset == GLOBAL.address("CONTROL") else 0  # RESET never clears
    with pytest.raises(TimeoutError, match="CONTROL.RESET to clear.*reload the bitstream"):
        backend.reset()


# --- a BAR in a file, behind a fake sysfs tree --------------------------------------------------

def make_device(root: Path, *, size=bar_bytes(4, 16), identity=True, driver=None, iommu_group=None) -> Path:
    dev = root / "0000:03:00.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x10ee\n")
    (dev / "device").write_text(f"{ARKDMA_PCI_DEVICE_ID:#06x}\n")
    (dev / "resource").write_text(f"0x00000000f0000000 {0xF0000000 + size - 1:#018x} 0x0000000000040200\n")
    data = bytearray(size)
    if identity:
        for name, value in (("ID", DEVICE_MAGIC), ("VERSION", version_word()), ("CAPS", 7), ("NUM_QUEUES", 4),
                            ("SLOTS", 16), ("NUM_REGIONS", 8), ("WINDOW_BASE", WINDOW_BASE),
                            ("WINDOW_STRIDE", window_stride(16))):
            struct.pack_into("<I", data, GLOBAL.address(name), value)
    (dev / "resource0").write_bytes(data)
    if driver:
        (root / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        (dev / "driver").symlink_to(root / "drivers" / driver)
    if iommu_group is not None:
        (root / "groups" / str(iommu_group)).mkdir(parents=True, exist_ok=True)
        (dev / "iommu_group").symlink_to(root / "groups" / str(iommu_group))
    return dev


def test_sysfs_bar_maps_the_resource_file(tmp_path):
    dev = make_device(tmp_path)
    assert resource_size(dev, 0) == bar_bytes(4, 16)
    bar = open_sysfs(dev)
    try:
        backend = CardBackend(bar, NoDma())
        assert (backend.geometry.num_queues, backend.geometry.slots, backend.geometry.num_regions) == (4, 16, 8)
        backend.configure_queue(2, 5, 0x40, start=(7 << 32) | 9)
        raw = (dev / "resource0").read_bytes()  # the writes went through the shared mapping into the file
        word = lambda a: struct.unpack_from("<I", raw, a)[0]  # noqa: E731
        assert [word(QUEUE.address(n, 2)) for n in ("COMPL_REGION", "COMPL_OFFSET_LO", "START_LO", "START_HI")] == [5, 0x40, 9, 7]
        assert word(GLOBAL.address("CONTROL")) == 1  # the engine was enabled when opened
        with pytest.raises(CardError, match="bind the card to vfio-pci"):
            backend.alloc(4096)
    finally:
        bar.close()


def test_bar_accesses_are_checked(tmp_path):
    dev = make_device(tmp_path)
    bar = open_sysfs(dev)
    try:
        bar.write32(0x10, 0xDEADBEEF)
        assert bar.read32(0x10) == 0xDEADBEEF
        with pytest.raises(BarError, match="unaligned or outside"):
            bar.read32(0x11)
        with pytest.raises(BarError, match="unaligned or outside"):
            bar.write32(bar.size, 0)
        with pytest.raises(ValueError, match="whole 32-bit words"):
            bar.write(0x20, b"abc")
    finally:
        bar.close()
    with pytest.raises(BarError, match="not a positive multiple of the page size"):
        MappedBar(os.open(dev / "resource0", os.O_RDWR), 100)


def test_a_bar_without_an_engine_is_refused(tmp_path):
    bar = open_sysfs(make_device(tmp_path, identity=False))
    try:
        with pytest.raises(CardError, match="not arkdma's"):
            CardBackend(bar, NoDma())
    finally:
        bar.close()


def test_unassigned_and_missing_bars(tmp_path):
    dev = make_device(tmp_path)
    (dev / "resource").write_text("0x0 0x0 0x0\n")
    with pytest.raises(BarError, match="not assigned"):
        resource_size(dev, 0)
    with pytest.raises(BarError, match="has no BAR2"):
        resource_size(dev, 2)


def test_no_permission_says_what_to_do(tmp_path, monkeypatch):
    dev = make_device(tmp_path)

    def refuse(path, flags):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(BarError, match="no permission to open .*resource0; run as root"):
        open_sysfs(dev)


def test_provider_reasons(tmp_path, monkeypatch):
    assert "no arkdma card" in CardProvider(tmp_path).unavailable_reason()
    dev = make_device(tmp_path)
    assert CardProvider(tmp_path).unavailable_reason() is None
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    assert "no permission to map" in CardProvider(tmp_path).unavailable_reason()
    monkeypatch.undo()
    (dev / "resource0").unlink()
    assert "has no BAR0" in CardProvider(tmp_path).unavailable_reason()
    with pytest.raises(EngineUnavailable, match="has no BAR0"):
        CardProvider(tmp_path).open()


def test_vfio_checks(tmp_path):
    no_group = make_device(tmp_path / "a", driver="vfio-pci")
    with pytest.raises(BarError, match="no IOMMU group: enable the IOMMU"):
        vfio_plan(no_group)
    other = make_device(tmp_path / "b", driver="xdma", iommu_group=12)
    with pytest.raises(BarError, match="bound to xdma, not vfio-pci.*new_id"):
        vfio_plan(other)
    bound = make_device(tmp_path / "c", driver="vfio-pci", iommu_group=12)
    with pytest.raises(BarError, match="is vfio-pci loaded"):
        vfio_plan(bound, dev_vfio=tmp_path / "dev_vfio")
    (tmp_path / "dev_vfio").mkdir()
    (tmp_path / "dev_vfio" / "12").write_text("")
    assert vfio_plan(bound, dev_vfio=tmp_path / "dev_vfio").group == 12
    assert "is vfio-pci loaded" in CardProvider(tmp_path / "c").unavailable_reason()


def test_geometry_the_card_cannot_give_is_refused(tmp_path):
    make_device(tmp_path)
    with pytest.raises(EngineUnavailable, match="rebuild the bitstream"):
        CardProvider(tmp_path).open(slots=64)


def test_gpu_mapping_of_the_bar_without_cuda_says_so(tmp_path):
    from driver.gpu.launch import gpu_unavailable_reason

    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is here: registering a file mapping as I/O memory would be a different error")
    bar = open_sysfs(make_device(tmp_path))
    try:
        with pytest.raises(CardError, match="cudaHostRegister failed|CUDA is missing"):
            CardBackend(bar, NoDma()).queue_pointers(0)
    finally:
        bar.close()


def test_the_registry_finds_the_card_provider():
    from ark_runtime import engines

    assert isinstance(engines.provider("card"), card_mod.CardProvider)
