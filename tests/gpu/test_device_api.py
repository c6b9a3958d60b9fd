"""GPU threads driving the software engine through device.cuh: copies in every direction, many queues from
many CTAs, error completions, timeouts, the host's abort, an engine stopped or closed mid-stream, stop and restart,
signal after data, and CuPy / PyTorch memory as regions. Skips without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from driver.abi import COMPLETION_ERROR_BIT, ErrorCode, Perm
from driver.descriptor import Descriptor
from driver.device import Device
from driver.dtypes import DESCRIPTOR_DTYPE
from driver.gpu import compile
from driver.gpu.arrays import register_array
from driver.gpu.launch import finish, gpu_unavailable_reason, launch
from driver.abi import DeviceCode, Site
from driver.gpu.queue import GpuQueue, handles, open_gpu_queues

pytestmark = pytest.mark.gpu
KiB, MiB = 1024, 1 << 20
GUARD = 0xA5
KERNELS = (Path(__file__).with_name("device_api_kernels.cu")).read_text()
u8, u16, u32, u64 = np.uint8, np.uint16, np.uint32, np.uint64


@pytest.fixture(scope="module")
def gpu():
    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"needs a CUDA GPU: {reason}")
    from host.provider import CudaProvider

    reason = CudaProvider().unavailable_reason()
    if reason:
        pytest.skip(f"software-cuda cannot run here: {reason}")
    from host import native

    if native.cuda_probe().name.startswith("Fake CUDA device"):
        pytest.skip("needs a real GPU to run kernels")
    return compile.load(KERNELS)


def engine(**kw) -> Device:
    from host.engine import SoftwareEngine

    kw.setdefault("num_queues", 8)
    kw.setdefault("slots", 16)
    return Device(SoftwareEngine("cuda", **kw))


def filled(dev: Device, size: int, placement: str, seed: int):
    buf = dev.alloc(size, placement)
    data = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)
    buf.write(0, data.tobytes())
    return buf, data


def guarded(dev: Device, size: int, placement: str):
    buf = dev.alloc(size, placement)
    buf.write(0, bytes([GUARD]) * size)
    return buf


def out_array(n: int = 4):
    import cupy

    return cupy.zeros(n, dtype=cupy.uint64)


def stream_args(q: GpuQueue, rs, rd, *, length, count, batch, inflight, src_stride, dst_stride, out):
    return (q.handle(), u16(rs.id), u64(0), u64(src_stride), u16(rd.id), u64(0), u64(dst_stride), u32(length),
            u32(count), u32(batch), u32(inflight), out)


def expected_dst(src: np.ndarray, size: int, length: int, count: int, src_stride: int, dst_stride: int) -> np.ndarray:
    want = np.full(size, GUARD, dtype=np.uint8)
    for k in range(count):
        want[k * dst_stride : k * dst_stride + length] = src[k * src_stride : k * src_stride + length]
    return want


PLACES = {"D2H": ("device", "host"), "H2D": ("host", "device"), "D2D": ("device", "device")}


@pytest.mark.parametrize("direction", list(PLACES))
@pytest.mark.parametrize("batch", [1, 8])
def test_gpu_posted_copies_land_exactly(gpu, direction, batch):
    """100 descriptors through a 16-slot window (it wraps six times), odd lengths, gaps that must keep
    their guard bytes; one post() per descriptor or post_batch() of 8."""
    length, count, src_stride, dst_stride = 3001, 100, 3001 + 40, 3001 + 64
    with engine() as dev:
        src, data = filled(dev, count * src_stride, PLACES[direction][0], seed=batch)
        dst = guarded(dev, count * dst_stride, PLACES[direction][1])
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = GpuQueue(dev, 0, start=7)
        out = out_array()
        s = launch(gpu.get_function("stream_one"), 1, 32,
                   stream_args(q, rs, rd, length=length, count=count, batch=batch, inflight=16,
                               src_stride=src_stride, dst_stride=dst_stride, out=out))
        finish(s, 20, [q])
        rc, ticket, _, posted = (int(v) for v in out.get())
        assert (DeviceCode(rc), ticket, posted) == (DeviceCode.OK, 7 + count, count), q.status().describe()
        assert q.status().ok and q.completed == 7 + count
        got = np.frombuffer(dst.read(0, dst.size), dtype=np.uint8)
        assert np.array_equal(got, expected_dst(data, dst.size, length, count, src_stride, dst_stride))


@pytest.mark.parametrize(("batch", "inflight"), [(0, 16), (65, 128), (8, 7), (1, 0)])
def test_post_stream_refuses_bad_sizes_and_posts_nothing(gpu, batch, inflight):
    """post_stream with a batch of 0 or past STREAM_BATCH (64), or fewer in flight than a batch, returns
    BAD_ARGUMENT with nothing posted; the queue then streams as usual."""
    with engine() as dev:
        src, data = filled(dev, 64 * KiB, "device", seed=11)
        dst = guarded(dev, 64 * KiB, "host")
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = GpuQueue(dev, 0)
        out = out_array()
        finish(launch(gpu.get_function("stream_one"), 1, 32,
                      stream_args(q, rs, rd, length=KiB, count=16, batch=batch, inflight=inflight, src_stride=KiB,
                                  dst_stride=KiB, out=out)), 20, [q])
        rc, _, _, posted = (int(v) for v in out.get())
        assert (DeviceCode(rc), posted, q.completed) == (DeviceCode.BAD_ARGUMENT, 0, 0)
        assert dst.read(0, dst.size) == bytes([GUARD]) * dst.size
        finish(launch(gpu.get_function("stream_one"), 1, 32,
                      stream_args(q, rs, rd, length=KiB, count=16, batch=4, inflight=8, src_stride=KiB,
                                  dst_stride=KiB, out=out)), 20, [q])
        assert DeviceCode(int(out.get()[0])) == DeviceCode.OK and q.completed == 16
        assert np.array_equal(np.frombuffer(dst.read(0, 16 * KiB), dtype=np.uint8), data[: 16 * KiB])


def test_many_queues_from_many_ctas(gpu):
    """Eight CTAs, each the producer of its own queue, 200 descriptors each through 16-slot windows."""
    length, count, nq = 4 * KiB, 200, 8
    with engine(num_queues=nq, slots=16) as dev:
        src, data = filled(dev, nq * count * length, "device", seed=3)
        dst = guarded(dev, nq * count * length, "host")
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        queues = open_gpu_queues(dev, nq)
        table = handles(queues)
        out = out_array(4 * nq)
        s = launch(gpu.get_function("stream_many"), nq, 32,
                   (table, u16(rs.id), u16(rd.id), u64(count * length), u32(length), u32(count), u32(4), u32(16), out))
        finish(s, 30, queues)
        res = out.get().reshape(nq, 4)
        assert [DeviceCode(int(r)) for r in res[:, 0]] == [DeviceCode.OK] * nq, [q.status().describe() for q in queues]
        assert list(res[:, 3]) == [count] * nq and all(q.completed == count for q in queues)
        assert np.array_equal(np.frombuffer(dst.read(0, dst.size), dtype=np.uint8), data)


def descriptors_array(descs: list[Descriptor]):
    import cupy

    raw = np.frombuffer(b"".join(d.pack() for d in descs), dtype=DESCRIPTOR_DTYPE)
    return cupy.asarray(raw.view(np.uint8))


@pytest.mark.parametrize(("bad", "code"), [("region", ErrorCode.UNKNOWN_REGION), ("bounds", ErrorCode.OUT_OF_BOUNDS)])
def test_error_completion_is_seen_by_the_gpu(gpu, bad, code):
    with engine() as dev:
        src, data = filled(dev, 64 * KiB, "device", seed=5)
        dst = guarded(dev, 64 * KiB, "host")
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = GpuQueue(dev, 2)
        wrong = Descriptor(rs.id, 0, 12, 0, 1024, cookie=0xBAD) if bad == "region" else \
            Descriptor(rs.id, 0, rd.id, 64 * KiB - 100, 1024, cookie=0xBAD)
        descs = [Descriptor(rs.id, 0, rd.id, 0, 4 * KiB), Descriptor(rs.id, 4 * KiB, rd.id, 4 * KiB, 4 * KiB),
                 wrong, Descriptor(rs.id, 8 * KiB, rd.id, 8 * KiB, 4 * KiB)]
        out = out_array()
        s = launch(gpu.get_function("post_list"), 1, 32, (q.handle(), descriptors_array(descs), u32(len(descs)), out))
        finish(s, 20, [q])
        assert DeviceCode(int(out.get()[0])) == DeviceCode.QUEUE_ERROR
        st = q.status()
        assert (st.code, st.site, st.queue, st.expected) == (DeviceCode.QUEUE_ERROR, Site.WAIT, 2, 4)
        assert st.observed == 2 | 1 << COMPLETION_ERROR_BIT and st.failures == 1
        qs = dev.backend.queue_state(2)
        assert (qs.error, qs.error_cookie, qs.error_index) == (code, 0xBAD, 2)
        got = dst.read(0, 12 * KiB)
        assert got[: 8 * KiB] == data[: 8 * KiB].tobytes() and got[8 * KiB :] == bytes([GUARD]) * 4 * KiB


def test_wait_times_out_reports_and_returns_then_completes_after_restart(gpu):
    """Engine thread stopped: the GPU's wait gives up after its budget with TIMEOUT in the status record;
    once the engine starts again the posted descriptor runs."""
    with engine() as dev:
        src, data = filled(dev, 64 * KiB, "device", seed=6)
        dst = guarded(dev, 64 * KiB, "host")
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = GpuQueue(dev, 0, budget_s=0.05)
        dev.backend.stop()
        out = out_array()
        s = launch(gpu.get_function("post_list"), 1, 32,
                   (q.handle(), descriptors_array([Descriptor(rs.id, 0, rd.id, 0, 64 * KiB)]), u32(1), out))
        waited = finish(s, 10, [q])
        st = q.status()
        assert DeviceCode(int(out.get()[0])) == DeviceCode.TIMEOUT and (st.code, st.site) == (DeviceCode.TIMEOUT, Site.WAIT)
        assert (st.expected, st.observed) == (1, 0) and 0.05e9 <= st.waited_ns < 2e9 and waited < 5
        dev.backend.start()
        assert q.wait(1, timeout=10) == 1
        assert dst.read(0, 64 * KiB) == data.tobytes()


def test_post_gives_up_when_the_window_stays_full(gpu):
    with engine(slots=8) as dev:
        src, _ = filled(dev, 64 * KiB, "device", seed=7)
        dst = guarded(dev, 64 * KiB, "host")
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = GpuQueue(dev, 0, budget_s=0.05)
        dev.backend.stop()
        descs = [Descriptor(rs.id, 1024 * i, rd.id, 1024 * i, 1024) for i in range(12)]
        out = out_array()
        finish(launch(gpu.get_function("post_list"), 1, 32, (q.handle(), descriptors_array(descs), u32(12), out)), 10, [q])
        rc, _, posted = (int(v) for v in out.get()[:3])
        st = q.status()
        assert (DeviceCode(rc), posted) == (DeviceCode.TIMEOUT, 8)
        assert (st.code, st.site, st.expected, st.observed) == (DeviceCode.TIMEOUT, Site.POST, 1, 0)
        assert q.producer() == (8, 0)  # nothing beyond the window was written or rung


def test_host_abort_ends_a_long_wait(gpu):
    with engine() as dev:
        src, _ = filled(dev, 4 * KiB, "device", seed=8)
        dst = guarded(dev, 4 * KiB, "host")
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = GpuQueue(dev, 0, budget_s=120)
        dev.backend.stop()
        out = out_array()
        s = launch(gpu.get_function("post_list"), 1, 32,
                   (q.handle(), descriptors_array([Descriptor(rs.id, 0, rd.id, 0, 4 * KiB)]), u32(1), out))
        time.sleep(0.05)
        assert not s.done
        t0 = time.monotonic()
        q.abort()
        finish(s, 5)
        assert time.monotonic() - t0 < 1.0
        st = q.status()
        assert DeviceCode(int(out.get()[0])) == DeviceCode.ABORTED and (st.code, st.site) == (DeviceCode.ABORTED, Site.WAIT)


def test_engine_stopped_mid_stream(gpu):
    """A long stream of 1 MiB copies; the engine thread stops while it runs. The GPU reports TIMEOUT with
    the count it saw and exits; every descriptor below that count landed; after a restart the rest runs."""
    length, count, wrap = MiB, 6000, 64 * MiB
    per_wrap = wrap // length
    with engine(slots=64) as dev:
        src, data = filled(dev, wrap, "device", seed=9)
        dst = guarded(dev, wrap, "host")
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = GpuQueue(dev, 0, budget_s=0.3)
        out = out_array()
        # Offsets wrap every 64 descriptors: the kernel sees strides of one length and a 64 MiB window.
        s = launch(gpu.get_function("stream_many"), 1, 32,
                   (handles([q]), u16(rs.id), u16(rd.id), u64(0), u32(length), u32(per_wrap), u32(16), u32(64), out))
        finish(s, 20, [q])
        assert DeviceCode(int(out.get()[0])) == DeviceCode.OK  # one clean pass first
        first = int(out.get()[1])
        q2 = out_array()
        big = launch(gpu.get_function("stream_one"), 1, 32,
                     stream_args(q, rs, rd, length=length, count=count, batch=16, inflight=64, src_stride=0,
                                 dst_stride=0, out=q2))
        time.sleep(0.02)
        dev.backend.stop()
        finish(big, 10, [q])
        rc, ticket, _, posted = (int(v) for v in q2.get())
        st = q.status()
        assert DeviceCode(rc) == DeviceCode.TIMEOUT and st.code == DeviceCode.TIMEOUT
        assert first <= st.observed < first + count and posted < count
        assert np.array_equal(np.frombuffer(dst.read(0, wrap), dtype=np.uint8), data)
        dev.backend.start()
        assert q.wait(ticket, timeout=20) == ticket


def test_engine_closed_mid_stream(gpu):
    """The engine is closed (thread stopped, queue memory and buffers freed) while a kernel streams through
    it: the kernel gives up with TIMEOUT in its status record, and no CUDA error follows. In a process of its
    own, so a fault there cannot poison this one's CUDA context."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "tests.gpu.engine_closed_mid_stream"], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "error" not in got, got
    assert got["running_at_close"], got
    assert DeviceCode(got["rc"]) == DeviceCode.TIMEOUT and DeviceCode(got["code"]) == DeviceCode.TIMEOUT, got
    assert Site(got["site"]) in (Site.POST, Site.WAIT) and got["posted"] < 6000, got
    assert got["kernel_s_after_close"] < 5, got


def test_queue_restart_at_a_new_start_index(gpu):
    with engine() as dev:
        src, data = filled(dev, 64 * KiB, "device", seed=10)
        dst = guarded(dev, 64 * KiB, "device")
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = GpuQueue(dev, 1)
        fn = gpu.get_function("stream_one")
        for start in (0, 1 << 40):
            if start:
                q.restart(start)
            out = out_array()
            finish(launch(fn, 1, 32, stream_args(q, rs, rd, length=KiB, count=64, batch=4, inflight=16,
                                                 src_stride=KiB, dst_stride=KiB, out=out)), 20, [q])
            assert (DeviceCode(int(out.get()[0])), int(out.get()[1])) == (DeviceCode.OK, start + 64)
            assert q.completed == start + 64 and q.producer()[0] == start + 64
        assert dst.read(0, 64 * KiB) == data.tobytes()


def test_signal_after_data(gpu):
    """One CTA copies 1 MiB GPU to GPU and signals a flag with an IMM descriptor; another CTA waits on
    the flag with wait_signal() and finds every byte already there."""
    import cupy

    with engine() as dev:
        src = cupy.asarray(np.random.default_rng(11).integers(0, 256, MiB, dtype=np.uint8))
        dst = cupy.zeros(MiB, dtype=cupy.uint8)
        flag = cupy.zeros(8, dtype=cupy.uint64)
        rs = register_array(dev, src, Perm.READ)
        rd = register_array(dev, dst, Perm.WRITE)
        rf = register_array(dev, flag, Perm.WRITE)
        producer, waiter = GpuQueue(dev, 0), GpuQueue(dev, 1)
        out = out_array()
        s = launch(gpu.get_function("signal_after_data"), 2, 32,
                   (producer.handle(), waiter.handle(), u16(rs.id), u16(rd.id), u32(MiB), u16(rf.id), u64(8),
                    flag[1:], u64(0x5EED), src, dst, out))
        finish(s, 20, [producer, waiter])
        assert [int(v) for v in out.get()[:3]] == [0, 0, 0]
        assert int(flag.get()[1]) == 0x5EED and producer.completed == 2


def test_poll_reports_pending_then_done(gpu):
    with engine() as dev:
        src, _ = filled(dev, MiB, "device", seed=12)
        dst = guarded(dev, MiB, "host")
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = GpuQueue(dev, 0)
        out = out_array()
        d = np.frombuffer(Descriptor(rs.id, 0, rd.id, 0, MiB).pack(), dtype=DESCRIPTOR_DTYPE)
        finish(launch(gpu.get_function("post_then_poll"), 1, 32, (q.handle(), d, out)), 10, [q])
        rc, looks = (int(v) for v in out.get()[:2])
        assert DeviceCode(rc) == DeviceCode.OK and looks > 1  # 1 MiB over PCIe takes many looks


class DLPackOnly:
    """An array seen only through DLPack."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kw):
        return self.array.__dlpack__(**kw)


@pytest.mark.parametrize("through", ["cuda_array_interface", "dlpack"])
def test_cupy_and_torch_memory_as_regions(gpu, through):
    import cupy

    torch = pytest.importorskip("torch")
    with engine() as dev:
        src = cupy.asarray(np.random.default_rng(13).integers(0, 256, 256 * KiB, dtype=np.uint8))
        dst = torch.full((256 * KiB,), GUARD, dtype=torch.uint8, device="cuda")
        wrap = DLPackOnly if through == "dlpack" else (lambda a: a)
        rs, rd = register_array(dev, wrap(src)), register_array(dev, wrap(dst))
        assert rs.size == rd.size == 256 * KiB and rd.addr == dst.data_ptr()
        q = GpuQueue(dev, 0)
        out = out_array()
        finish(launch(gpu.get_function("stream_one"), 1, 32,
                      stream_args(q, rs, rd, length=4 * KiB, count=64, batch=8, inflight=16,
                                  src_stride=4 * KiB, dst_stride=4 * KiB, out=out)), 20, [q])
        torch.cuda.synchronize()
        assert DeviceCode(int(out.get()[0])) == DeviceCode.OK
        assert np.array_equal(dst.cpu().numpy(), cupy.asnumpy(src))
