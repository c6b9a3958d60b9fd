"""The software engine's CUDA executor driven from the CPU: D2H, H2D, same-GPU D2D and peer copies,
merged and scattered descriptors over several streams, FENCE and IMM ordering, error classes, many
queues, stop and restart, unreachable memory, and a GPU kernel posting through queue_pointers().

Runs on a GPU machine; in CI the same tests run against the CUDA driver test double
(tests/host/test_cuda_executor_on_fake_driver.py), which jitters every stream operation.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from driver.abi import COMPLETION_ERROR_BIT, ErrorCode, Flag, Perm
from driver.descriptor import Descriptor
from driver.device import Device
from driver.errors import QueueError
from driver.gpu.arrays import register_array
from driver.player import play
from host.native import EngineArgumentError

pytestmark = pytest.mark.gpu
KiB, MiB = 1024, 1 << 20


@pytest.fixture(scope="module")
def cuda():
    """The CUDA device the executor uses; skips without one."""
    from host import native
    from host.provider import CudaProvider

    reason = CudaProvider().unavailable_reason()
    if reason:
        pytest.skip(f"software-cuda cannot run here: {reason}")
    return native.cuda_probe()


def fake(device) -> bool:
    return device.name.startswith("Fake CUDA device")


def open_device(**kw) -> Device:
    from host.engine import SoftwareEngine

    return Device(SoftwareEngine("cuda", **kw))


def filled(dev: Device, size: int, placement: str, seed: int = 0):
    buf = dev.alloc(size, placement)
    data = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()
    buf.write(0, data)
    return buf, data


PATHS = [("device", "host"), ("host", "device"), ("device", "device"), ("host", "host")]


@pytest.mark.parametrize(("src_place", "dst_place"), PATHS, ids=["D2H", "H2D", "D2D", "H2H"])
@pytest.mark.parametrize("streams", [1, 3])
def test_copies_land_exactly(cuda, src_place, dst_place, streams):
    """Contiguous runs (merged into one copy) and scattered ones, with guard bytes around each."""
    with open_device(streams_per_queue=streams, slots=256) as dev:
        src, data = filled(dev, 2 * MiB, src_place)
        dst = dev.alloc(4 * MiB, dst_place)
        dst.write(0, b"\xa5" * dst.size)
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = dev.queue()
        rng = np.random.default_rng(7)
        descs, expect, base = [], [], 0
        for i in range(200):
            n = int(rng.integers(0, 20 * KiB))
            so = int(rng.integers(0, 2 * MiB - n))
            merged = i % 4 != 0 and descs and expect[-1][2] + expect[-1][1] == so
            do = base if merged else base + 64
            descs.append(Descriptor(rs.id, so, rd.id, do, n, Flag.NOTIFY if i % 50 == 49 else 0, cookie=i))
            expect.append((do, n, so))
            base = do + n
            if i % 3:  # the next one continues this one in both source and destination: mergeable
                so2 = so + n
                if so2 + 100 <= 2 * MiB:
                    descs.append(Descriptor(rs.id, so2, rd.id, base, 100))
                    expect.append((base, 100, so2))
                    base += 100
        assert q.wait(q.post(descs), timeout=30) == len(descs)
        out = dst.read(0, dst.size)
        covered = np.zeros(dst.size, bool)
        for do, n, so in expect:
            assert out[do : do + n] == data[so : so + n], f"copy to +{do} ({n} bytes) differs"
            covered[do : do + n] = True
        assert set(np.frombuffer(out, np.uint8)[~covered]) <= {0xA5}, "a byte outside every destination changed"
        c = dev.backend.counters()
        assert (c.descriptors, c.bytes) == (len(descs), sum(n for _, n, _ in expect))
        s = dev.backend.stats()
        assert s.copies < s.issued, "contiguous descriptors were not merged"


@pytest.mark.parametrize("streams", [1, 4])
def test_fence_and_imm_order_across_streams(cuda, streams):
    """A FENCE chain through device memory, then an IMM signal: the signal lands after the data."""
    with open_device(streams_per_queue=streams) as dev:
        src, data = filled(dev, 256 * KiB, "host", seed=5)
        work = dev.alloc(8 * 256 * KiB, "device")
        sig = dev.alloc(64, "host")
        sig.write(0, bytes(64))
        rs, rw, rf = dev.register(src, perms=Perm.READ), dev.register(work), dev.register(sig, perms=Perm.WRITE)
        q = dev.queue()
        for rnd in range(1, 4):
            descs = [Descriptor(rs.id, 0, rw.id, 0, 256 * KiB)]
            descs += [Descriptor(rw.id, (k - 1) * 256 * KiB, rw.id, k * 256 * KiB, 256 * KiB, Flag.FENCE) for k in range(1, 8)]
            descs.append(Descriptor.immediate(rf.id, 8, rnd))
            q.post(descs)
            deadline = time.monotonic() + 30
            while int.from_bytes(sig.read(8, 8), "little") != rnd:
                assert time.monotonic() < deadline, "the IMM signal never landed"
            assert work.read(7 * 256 * KiB, 256 * KiB) == data, "signal seen before the data it follows"
            work.write(0, bytes(8 * 256 * KiB))
            q.wait()


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        (dict(src_region=1, dst_region=0, length=8), ErrorCode.PERMISSION),
        (dict(src_region=0, src_offset=MiB - 4, dst_region=1, length=8), ErrorCode.OUT_OF_BOUNDS),
        (dict(dst_region=1, dst_offset=12, length=8, flags=Flag.IMM), ErrorCode.MISALIGNED),
        (dict(src_region=0, dst_region=9, length=8), ErrorCode.UNKNOWN_REGION),
    ],
    ids=lambda v: v.name if isinstance(v, ErrorCode) else "",
)
def test_errors_halt_after_the_work_before_them(cuda, bad, code):
    with open_device(streams_per_queue=2) as dev:
        src, data = filled(dev, MiB, "device")
        dst = dev.alloc(MiB, "device")
        dst.write(0, bytes(MiB))
        dev.register(src, perms=Perm.READ, region=0)
        dev.register(dst, perms=Perm.WRITE, region=1)
        q = dev.queue(start=70)
        good = [Descriptor(0, 64 * KiB * i, 1, 64 * KiB * i, 64 * KiB) for i in range(6)]
        with pytest.raises(QueueError) as err:
            q.wait(q.post(good + [Descriptor(**bad, cookie=0xC0DE), Descriptor(0, 0, 1, 900 * KiB, 64)]), timeout=30)
        assert (err.value.code, err.value.cookie, err.value.index) == (code, 0xC0DE, 76)
        assert q.completion_word() == 76 | 1 << COMPLETION_ERROR_BIT
        assert dst.read(0, 384 * KiB) == data[: 384 * KiB] and dst.read(900 * KiB, 64) == bytes(64)
        assert [(e.code, e.index) for e in dev.backend.error_log()] == [(code, 76)]


def test_many_queues_with_several_streams(cuda):
    nq, per = 32, 24
    with open_device(num_queues=nq, slots=32, streams_per_queue=2) as dev:
        src, data = filled(dev, 256 * KiB, "device")
        dst = dev.alloc(nq * per * 8 * KiB, "host")
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        queues = [dev.queue(start=q << 33) for q in range(nq)]
        tickets = [hq.post([Descriptor(rs.id, 8 * KiB * i, rd.id, (hq.id * per + i) * 8 * KiB, 8 * KiB,
                                       Flag.FENCE if i == per // 2 else 0) for i in range(per)]) for hq in queues]
        for hq, t in zip(queues, tickets):
            assert hq.wait(t, timeout=30) == (hq.id << 33) + per
        for q in range(nq):
            assert dst.read(q * per * 8 * KiB, per * 8 * KiB) == data[: per * 8 * KiB]


def test_stop_and_restart(cuda):
    with open_device() as dev:
        src, data = filled(dev, MiB, "device")
        dst = dev.alloc(MiB, "host")
        dst.write(0, bytes(MiB))
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = dev.queue()
        eng = dev.backend
        eng.stop()
        ticket = q.post([Descriptor(rs.id, 64 * KiB * i, rd.id, 64 * KiB * i, 64 * KiB) for i in range(16)])
        time.sleep(0.05)
        assert q.completed == 0 and dst.read(0, 64) == bytes(64)
        eng.start()
        assert q.wait(ticket, timeout=30) == 16 and dst.read(0, MiB) == data
        for _ in range(3):
            eng.stop()
            eng.start()
        assert q.wait(q.post(Descriptor(rs.id, 0, rd.id, 0, 4 * KiB)), timeout=30) == 17


def test_memory_cuda_cannot_reach_is_refused(cuda):
    pageable = np.zeros(4096, np.uint8)
    with open_device() as dev:
        with pytest.raises(EngineArgumentError, match="not memory CUDA can reach"):
            dev.backend.set_region(0, pageable.ctypes.data, 4096, Perm.READ)


def test_a_copy_the_driver_refuses_is_a_bus_error(cuda, monkeypatch):
    if not fake(cuda):
        pytest.skip("only the driver test double can be told to refuse a copy")
    monkeypatch.setenv("ARKDMA_FAKE_CUDA_FAIL_LENGTH", "4093")
    with open_device(streams_per_queue=2) as dev:
        src, data = filled(dev, 64 * KiB, "device")
        dst = dev.alloc(64 * KiB, "device")
        dst.write(0, bytes(64 * KiB))
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = dev.queue(start=9)
        good = [Descriptor(rs.id, 0, rd.id, 0, 4096), Descriptor(rs.id, 4096, rd.id, 8192, 4096, Flag.FENCE)]
        with pytest.raises(QueueError) as err:
            q.wait(q.post(good + [Descriptor(rs.id, 0, rd.id, 20000, 4093, cookie=0xF00),
                                  Descriptor(rs.id, 0, rd.id, 30000, 64)]))
        assert (err.value.code, err.value.index, err.value.cookie) == (ErrorCode.BUS_ERROR, 11, 0xF00)
        assert q.completion_word() == 11 | 1 << COMPLETION_ERROR_BIT
        assert dst.read(0, 4096) == data[:4096] and dst.read(8192, 4096) == data[4096:8192]
        assert dst.read(20000, 11000) == bytes(11000)
        assert "cuMemcpy" in dev.backend.note()


def test_conformance_scenarios_with_several_streams_and_without_merging(cuda):
    from host.engine import SoftwareEngine
    from tests.conformance.compare import assert_same, check_expectations
    from tests.conformance.scenarios import all_scenarios
    from tests.conformance.test_conformance import reference_for

    for options in (dict(streams_per_queue=3), dict(streams_per_queue=2, merge=False, batch_copies=False)):
        for sc in all_scenarios():
            if sc.needs:
                continue
            with SoftwareEngine("cuda", sc.num_queues, sc.slots, sc.num_regions, **options) as eng:
                out = play(eng, sc)
            check_expectations(sc, out)
            assert_same(out, reference_for(sc, out), sc)


def test_peer_gpu_copy(cuda):
    if fake(cuda) or cuda.count < 2:
        pytest.skip("needs two GPUs")
    import cupy

    with open_device() as dev:
        src, data = filled(dev, 4 * MiB, "device")
        with cupy.cuda.Device(1):
            peer = cupy.full(4 * MiB + 128, 0xA5, dtype=cupy.uint8)
            cupy.cuda.Device(1).synchronize()
        rs = dev.register(src, perms=Perm.READ)
        rp = register_array(dev, peer, perms=Perm.WRITE)  # enables peer access from GPU 0 first
        q = dev.queue()
        q.wait(q.post([Descriptor(rs.id, MiB * i, rp.id, 64 + MiB * i, MiB) for i in range(4)]), timeout=30)
        with cupy.cuda.Device(1):
            out = cupy.asnumpy(peer).tobytes()
        assert out[:64] == b"\xa5" * 64 and out[64 : 64 + 4 * MiB] == data and out[-64:] == b"\xa5" * 64


POST_KERNEL = r"""
extern "C" __global__ void post(unsigned long long window, unsigned long long doorbell, unsigned int slot,
                                unsigned int producer_index, unsigned long long w0, unsigned long long w1,
                                unsigned long long w2, unsigned long long w3) {
    unsigned long long* d = (unsigned long long*)(window + 32ull * slot);
    d[0] = w0; d[1] = w1; d[2] = w2; d[3] = w3;
    __threadfence_system();
    *(volatile unsigned int*)doorbell = producer_index;
}
"""


def test_gpu_kernel_posts_through_queue_pointers(cuda):
    """A GPU thread writes a descriptor into the window and rings the doorbell through the device
    pointers queue_pointers() gives; the engine copies and the completion word moves."""
    if fake(cuda):
        pytest.skip("needs a real GPU to run a kernel")
    import cupy

    with open_device(slots=8) as dev:
        src, data = filled(dev, 64 * KiB, "device")
        dst = dev.alloc(64 * KiB, "host")
        dst.write(0, bytes(64 * KiB))
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = dev.queue(start=5)
        p = dev.backend.queue_pointers(q.id)
        assert p.window_device and p.doorbell_device and p.slots == 8
        kernel = cupy.RawKernel(POST_KERNEL, "post")
        for i in range(12):  # round the 8-slot window
            raw = np.frombuffer(Descriptor(rs.id, 4 * KiB * i, rd.id, 4 * KiB * i, 4 * KiB, Flag.NOTIFY).pack(), "<u8")
            index = 5 + i
            kernel((1,), (1,), (np.uint64(p.window_device), np.uint64(p.doorbell_device), np.uint32(index % 8),
                                np.uint32(index + 1), *(np.uint64(w) for w in raw)))
            cupy.cuda.runtime.deviceSynchronize()
            assert q.wait(index + 1, timeout=10) == index + 1
        assert dst.read(0, 48 * KiB) == data[: 48 * KiB]
