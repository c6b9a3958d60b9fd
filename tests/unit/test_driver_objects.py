"""Driver objects on the reference engine: descriptors, the region table, Device and HostQueue."""

from __future__ import annotations

import numpy as np
import pytest

from driver.abi import COMPLETION_ERROR_BIT, ErrorCode, Flag, Perm
from driver.descriptor import Descriptor
from driver.device import Device
from driver.dtypes import DESCRIPTOR_DTYPE
from driver.errors import ArkdmaError, EngineTimeout, QueueError, RegionError
from driver.reference_engine import ReferenceEngine


@pytest.fixture
def device():
    with Device(ReferenceEngine(num_queues=2, slots=8, num_regions=8)) as dev:
        yield dev


def test_descriptor_fields_are_range_checked():
    with pytest.raises(ValueError, match="length=4294967296 does not fit in 32 bits"):
        Descriptor(length=1 << 32)
    with pytest.raises(ValueError, match="not 31"):
        Descriptor.unpack(b"\0" * 31)


def test_immediate_descriptor_carries_its_value_in_src_offset():
    d = Descriptor.immediate(2, 64, 0xABCD, cookie=9)
    assert (d.flags & Flag.IMM, d.src_offset, d.length, d.dst_region, d.cookie) == (Flag.IMM, 0xABCD, 8, 2, 9)


def test_region_table_refuses_overlap_bad_ids_and_empty_regions(device):
    buf = device.alloc(4096)
    first = device.register(buf, size=2048)
    with pytest.raises(RegionError, match="overlaps region"):
        device.register(buf, offset=1024, size=2048)
    with pytest.raises(RegionError, match="runs outside its buffer"):
        device.register(buf, offset=4000, size=200)
    with pytest.raises(RegionError, match="at least one byte"):
        device.register(buf, offset=2048, size=0)
    with pytest.raises(RegionError, match=f"region id {first.id} is taken"):
        device.register(device.alloc(64), region=first.id)
    with pytest.raises(RegionError, match="outside 0..7"):
        device.register(device.alloc(64), region=8)
    with pytest.raises(RegionError, match="READ, WRITE or both"):
        device.register(buf, offset=2048, size=64, perms=Perm(0))


def test_host_queue_posts_more_than_the_ring_holds_and_every_byte_lands(device):
    src, dst = device.alloc(64 * 1024), device.alloc(64 * 1024)
    payload = np.random.default_rng(1).integers(0, 256, 64 * 1024, dtype=np.uint8).tobytes()
    src.write(0, payload)
    rs, rd = device.register(src, perms=Perm.READ), device.register(dst, perms=Perm.WRITE)
    q = device.queue()
    descs = [Descriptor(rs.id, i * 1024, rd.id, i * 1024, 1024) for i in range(64)]  # 64 > 8 slots
    ticket = q.post(descs)
    assert ticket == 64 and q.wait() == 64
    assert dst.read(0, len(payload)) == payload


def test_host_queue_accepts_descriptor_arrays_and_refuses_other_dtypes(device):
    src, dst = device.alloc(256), device.alloc(256)
    src.write(0, bytes(range(256)))
    rs, rd = device.register(src), device.register(dst)
    arr = np.zeros(2, DESCRIPTOR_DTYPE)
    arr["src_region"], arr["dst_region"], arr["length"] = rs.id, rd.id, 128
    arr["src_offset"] = arr["dst_offset"] = [0, 128]
    q = device.queue()
    q.wait(q.post(arr))
    assert dst.read(0, 256) == bytes(range(256))
    with pytest.raises(ArkdmaError, match="DESCRIPTOR_DTYPE"):
        q.post(np.zeros(64, np.uint8))


def test_an_error_completion_raises_with_code_cookie_and_index(device):
    buf = device.alloc(4096)
    r = device.register(buf, perms=Perm.READ)
    q = device.queue()
    q.post([Descriptor(r.id, 0, r.id, 2048, 64, cookie=1), Descriptor(r.id, 0, 5, 0, 64, cookie=2)])
    with pytest.raises(QueueError) as info:
        q.wait()
    assert (info.value.code, info.value.cookie, info.value.index) == (ErrorCode.PERMISSION, 1, 0)
    assert q.completion_word() >> COMPLETION_ERROR_BIT == 1


def test_waiting_on_a_disabled_queue_times_out_instead_of_hanging(device):
    buf = device.alloc(4096)
    device.register(buf)
    q = device.queue()
    device.backend.disable_queue(q.id)
    q.posted += 1  # a descriptor the engine will never see
    with pytest.raises(EngineTimeout, match="is the engine running"):
        q.wait(timeout=0.05)


def test_queue_ids_are_handed_out_once(device):
    q0, q1 = device.queue(), device.queue()
    assert {q0.id, q1.id} == {0, 1}
    with pytest.raises(ArkdmaError, match="queues are in use"):
        device.queue()
    q0.stop()
    assert device.queue().id == q0.id
