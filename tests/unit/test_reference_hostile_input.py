"""The reference engine and the Device over it refuse what the software engine refuses: use after close,
permissions outside READ|WRITE, unknown placements, sizes that are not ints, regions over foreign buffers."""

from __future__ import annotations

import pytest

from driver.abi import Perm
from driver.descriptor import Descriptor
from driver.device import Device
from driver.errors import ArkdmaError, RegionError
from driver.reference_engine import ReferenceEngine


@pytest.fixture
def dev():
    with Device(ReferenceEngine(num_queues=2, slots=8, num_regions=8)) as device:
        yield device


def test_use_after_close_is_refused():
    eng = ReferenceEngine()
    eng.close()
    for call in (lambda: eng.alloc(64), lambda: eng.set_region(0, 0x1000, 64, 1), lambda: eng.enable_queue(0),
                 lambda: eng.ring(0, 1), lambda: eng.queue_state(0)):
        with pytest.raises(ArkdmaError, match="closed"):
            call()


@pytest.mark.parametrize("perms", [99, 4, -1, 0])
def test_permissions_outside_read_and_write_are_refused(dev, perms):
    with pytest.raises(RegionError, match="perms|READ, WRITE or both"):
        dev.register(dev.alloc(64), perms=perms)
    with pytest.raises(ValueError):
        dev.backend.set_region(0, 0x1000, 64, 99)


@pytest.mark.parametrize("placement", ["gpu", "", None, "HOST"])
def test_unknown_placements_are_refused(dev, placement):
    with pytest.raises(ValueError, match="placement"):
        dev.alloc(64, placement)


@pytest.mark.parametrize("size", [64.0, 1.5, "64", None])
def test_sizes_that_are_not_ints_are_refused(dev, size):
    with pytest.raises(TypeError, match="must be an int"):
        dev.alloc(size)


@pytest.mark.parametrize("field", ["length", "src_offset", "dst_region"])
def test_descriptor_fields_that_are_not_ints_are_refused(field):
    with pytest.raises(TypeError, match="must be an int"):
        Descriptor(**{field: 1.0})


@pytest.mark.parametrize("kwargs", [{"offset": 1.5}, {"size": 64.0}, {"region": "1"}])
def test_region_arguments_that_are_not_ints_are_refused(dev, kwargs):
    with pytest.raises(RegionError, match="must be an int"):
        dev.register(dev.alloc(128), **kwargs)


def test_a_buffer_of_another_reference_engine_is_refused(dev):
    with Device(ReferenceEngine()) as other:
        with pytest.raises(RegionError, match="not allocated by engine reference"):
            dev.register(other.alloc(64))


def test_buffer_access_with_float_offsets_is_refused(dev):
    buf = dev.alloc(64)
    with pytest.raises(TypeError, match="offset must be an int"):
        buf.read(1.0, 8)
    with pytest.raises(TypeError, match="length must be an int"):
        buf.read(0, 8.0)


def test_waits_refuse_absurd_tickets_and_timeouts(dev):
    q = dev.queue()
    with pytest.raises(ArkdmaError, match="ticket is an int"):
        q.wait(5.0)
    with pytest.raises(ArkdmaError, match="timeout"):
        q.wait(timeout=float("inf"))


def test_modelled_memory_may_be_registered_by_address(dev):
    # the reference engine's bus is a model: an unbacked range is harmless and ends in BUS_ERROR
    r = dev.regions.register(addr=dev.backend.unbacked_address(64), size=64, perms=Perm.WRITE)
    assert r.size == 64


def test_a_queue_refused_its_completion_words_leaves_the_device_usable(dev):
    # found by the API fuzz campaign: a user region over all of the modelled bus made the completion
    # words' registration fail, and the next queue() crashed on the half-made state
    everything = dev.regions.register(addr=0, size=(1 << 48) + 1)
    for _ in range(2):
        with pytest.raises(RegionError, match="overlaps region"):
            dev.queue()
    dev.regions.unregister(everything)
    q = dev.queue()
    assert q.completed == 0
