"""The software engine with the host executor (memcpy), driven from the CPU: copies, FENCE, IMM,
every error class, ring and doorbell wrap, disable and reset in flight, many queues, the thread's
stop and restart, the raw window/doorbell path a GPU uses, and bad arguments."""

from __future__ import annotations

import ctypes
import os
import time

import numpy as np
import pytest

from driver.abi import COMPLETION_ERROR_BIT, ErrorCode, Flag, Perm
from driver.descriptor import Descriptor
from driver.device import Device
from driver.dtypes import DESCRIPTOR_DTYPE
from driver.errors import ArkdmaError, EngineTimeout, QueueError
from host.engine import ERRLOG_BATCH, SoftwareEngine
from host.memory import EngineClosed
from host.native import EngineArgumentError

KiB = 1024


def engine(**kw) -> SoftwareEngine:
    return SoftwareEngine("host", **kw)


def filled(dev: Device, size: int, seed: int = 0, placement: str = "host"):
    buf = dev.alloc(size, placement)
    data = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()
    buf.write(0, data)
    return buf, data


def test_copies_land_exactly_and_counters_count_payload_and_imm():
    with Device(engine()) as dev:
        src, data = filled(dev, 64 * KiB)
        dst = dev.alloc(64 * KiB + 128)
        dst.write(0, b"\xa5" * dst.size)
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = dev.queue(start=5)
        descs = [Descriptor(rs.id, 1000 * i, rd.id, 64 + 1000 * i, 1000, cookie=i) for i in range(10)]
        descs.append(Descriptor.immediate(rd.id, 64 * KiB + 64, 0x0123456789ABCDEF, flags=Flag.NOTIFY))
        assert q.wait(q.post(descs)) == 5 + 11
        out = dst.read(0, dst.size)
        assert out[:64] == b"\xa5" * 64
        assert out[64 : 64 + 10000] == data[:10000]
        assert out[64 + 10000 : 64 * KiB + 64] == b"\xa5" * (64 * KiB - 10000)
        assert int.from_bytes(out[64 * KiB + 64 : 64 * KiB + 72], "little") == 0x0123456789ABCDEF
        c = dev.backend.counters()
        assert (c.descriptors, c.bytes) == (11, 10000 + 8)
        assert q.completion_word() == 16


def test_fence_chain_reads_what_the_previous_copy_wrote():
    with Device(engine()) as dev:
        src, data = filled(dev, 8 * KiB, seed=3)
        work = dev.alloc(8 * 8 * KiB)
        flag = dev.alloc(64)
        flag.write(0, bytes(64))
        rs, rw, rf = dev.register(src, perms=Perm.READ), dev.register(work), dev.register(flag, perms=Perm.WRITE)
        q = dev.queue()
        descs = [Descriptor(rs.id, 0, rw.id, 0, 8 * KiB)]
        descs += [Descriptor(rw.id, (k - 1) * 8 * KiB, rw.id, k * 8 * KiB, 8 * KiB, Flag.FENCE) for k in range(1, 8)]
        descs.append(Descriptor.immediate(rf.id, 8, 77))
        q.wait(q.post(descs))
        assert work.read(7 * 8 * KiB, 8 * KiB) == data
        assert int.from_bytes(flag.read(8, 8), "little") == 77


BAD = {
    ErrorCode.INVALID_DESCRIPTOR: dict(src_region=0, dst_region=1, length=8, flags=1 << 4),
    ErrorCode.BAD_LENGTH: dict(dst_region=1, length=4, flags=Flag.IMM),
    ErrorCode.MISALIGNED: dict(dst_region=1, dst_offset=4, length=8, flags=Flag.IMM),
    ErrorCode.UNKNOWN_REGION: dict(src_region=7, dst_region=1, length=8),
    ErrorCode.PERMISSION: dict(src_region=1, dst_region=0, length=8),
    ErrorCode.OUT_OF_BOUNDS: dict(src_region=0, src_offset=4096 - 7, dst_region=1, length=8),
    ErrorCode.OVERLAP: dict(src_region=2, src_offset=0, dst_region=2, dst_offset=4, length=8),
}


@pytest.mark.parametrize("code", list(BAD), ids=lambda c: c.name)
def test_each_error_halts_after_the_good_work_and_is_logged(code):
    with Device(engine()) as dev:
        src, data = filled(dev, 4096)
        dst, scratch = dev.alloc(4096), dev.alloc(4096)
        dst.write(0, bytes(4096))
        dev.register(src, perms=Perm.READ, region=0)
        dev.register(dst, perms=Perm.WRITE, region=1)
        dev.register(scratch, region=2)
        q = dev.queue(start=40)
        good = Descriptor(0, 0, 1, 0, 100, cookie=1)
        later = Descriptor(0, 0, 1, 200, 100, Flag.NOTIFY, cookie=3)
        with pytest.raises(QueueError) as err:
            q.wait(q.post([good, Descriptor(**BAD[code], cookie=0xBAD), later]))
        assert (err.value.code, err.value.cookie, err.value.index) == (code, 0xBAD, 41)
        assert dst.read(0, 100) == data[:100] and dst.read(200, 100) == bytes(100)
        assert q.completion_word() == 41 | 1 << COMPLETION_ERROR_BIT
        st = dev.backend.queue_state(q.id)
        assert st.halted and st.error == code and not st.busy
        assert [(e.queue, e.code, e.cookie, e.index) for e in dev.backend.error_log()] == [(q.id, code, 0xBAD, 41)]
        assert dev.backend.error_log() == []  # popped


def raw_engine_queue(eng: SoftwareEngine, start: int):
    """A queue whose completion word the test reads directly, plus a source and destination region."""
    comp = eng.alloc(64)
    comp.write(0, bytes(64))
    eng.set_region(15, comp.addr, 64, Perm.WRITE)
    eng.configure_queue(0, 15, 0, start)
    eng.enable_queue(0)
    return comp


def word(buf) -> int:
    return int.from_bytes(buf.read(0, 8), "little")


def test_doorbell_errors_take_effect_after_the_posted_work():
    with engine(slots=16) as eng:
        src = eng.alloc(4096)
        dst = eng.alloc(4096)
        eng.set_region(0, src.addr, 4096, Perm.READ)
        eng.set_region(1, dst.addr, 4096, Perm.WRITE)
        start = (1 << 32) - 2
        comp = raw_engine_queue(eng, start)
        eng.write_slots(0, start, b"".join(Descriptor(0, 0, 1, 64 * i, 64).pack() for i in range(3)))
        eng.ring(0, start + 3)  # crosses the 32-bit wrap of the doorbell
        eng.ring(0, start + 3 + 17)  # 20 ahead of the completed count: overflow
        eng.wait_idle()
        assert word(comp) == (start + 3) | 1 << COMPLETION_ERROR_BIT
        st = eng.queue_state(0)
        assert st.error == ErrorCode.RING_OVERFLOW and st.error_index == (start + 20) & 0xFFFFFFFF


def test_ring_wraps_many_times_with_flow_control():
    with Device(engine(slots=4)) as dev:
        src, data = filled(dev, 64 * KiB)
        dst = dev.alloc(64 * KiB)
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = dev.queue(start=(1 << 32) - 10)  # and the doorbell wraps past 2**32 on the way
        descs = [Descriptor(rs.id, 512 * i, rd.id, 512 * i, 512, Flag.NOTIFY if i % 5 == 0 else 0) for i in range(128)]
        assert q.wait(q.post(descs)) == (1 << 32) - 10 + 128
        assert dst.read(0, 64 * KiB) == data


def test_gpu_style_producer_writes_window_memory_and_doorbell_directly():
    """What a GPU thread does: descriptors into the window, then a plain store to the doorbell word."""
    with engine(slots=8) as eng:
        src = eng.alloc(4096)
        src.write(0, bytes(range(256)) * 16)
        dst = eng.alloc(4096)
        eng.set_region(0, src.addr, 4096, Perm.READ)
        eng.set_region(1, dst.addr, 4096, Perm.WRITE)
        comp = raw_engine_queue(eng, start=6)
        p = eng.queue_pointers(0)
        assert p.slots == 8 and p.window_device == 0 and p.doorbell_host % 64 == 0
        window = np.ctypeslib.as_array((ctypes.c_uint8 * (8 * 32)).from_address(p.window_host)).view(DESCRIPTOR_DTYPE)
        for i in range(5):  # indices 6..10 wrap the 8-slot window
            window[(6 + i) % 8] = np.frombuffer(Descriptor(0, 100 * i, 1, 100 * i, 100).pack(), DESCRIPTOR_DTYPE)[0]
        ctypes.c_uint32.from_address(p.doorbell_host).value = 11
        deadline = time.monotonic() + 10
        while word(comp) != 11:
            assert time.monotonic() < deadline, "the engine never read the doorbell"
        assert dst.read(0, 500) == src.read(0, 500)
        assert all(p.doorbell_host != eng.queue_pointers(q).doorbell_host for q in range(1, 8))
        assert len({eng.queue_pointers(q).doorbell_host // 64 for q in range(8)}) == 8  # one line each


def test_disable_in_flight_leaves_an_exact_prefix_and_the_queue_restarts():
    n, size = 48, 256 * KiB
    with Device(engine(slots=64)) as dev:
        src, data = filled(dev, size)
        dst = dev.alloc(n * size)
        dst.write(0, b"\xa5" * dst.size)
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = dev.queue(start=3)
        q.post([Descriptor(rs.id, 0, rd.id, i * size, size) for i in range(n)])
        dev.backend.disable_queue(q.id)
        done = q.completed - 3
        assert 0 <= done <= n and not dev.backend.queue_state(q.id).busy
        for i in range(n):
            assert dst.read(i * size, size) == (data if i < done else b"\xa5" * size), f"descriptor {i} of {done} done"
        q.stop()
        q = dev.queue(q.id, start=1000)
        assert q.completed == 1000
        assert q.wait(q.post(Descriptor(rs.id, 0, rd.id, 0, 16))) == 1001
        assert dst.read(0, 16) == data[:16]


def test_reset_in_flight_clears_regions_queues_log_and_counters():
    with Device(engine()) as dev:
        src, _ = filled(dev, 1 << 20)
        dst = dev.alloc(32 << 20)
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = dev.queue()
        q.post([Descriptor(rs.id, 0, rd.id, i << 20, 1 << 20) for i in range(32)] + [Descriptor(9, 0, 9, 0, 1)])
        eng = dev.backend
        eng.reset()
        assert not eng.queue_state(q.id).enabled
        assert eng.error_log() == [] and eng.counters().descriptors == 0
        # The region table is empty: a queue set up again cannot reach the old regions.
        comp = raw_engine_queue(eng, start=0)
        eng.write_slots(0, 0, Descriptor(rs.id, 0, rd.id, 0, 8, cookie=9).pack())
        eng.ring(0, 1)
        eng.wait_idle()
        assert eng.queue_state(0).error == ErrorCode.UNKNOWN_REGION and word(comp) >> COMPLETION_ERROR_BIT


def test_many_queues_at_once():
    nq, per = 64, 40
    with Device(engine(num_queues=nq, slots=16, num_regions=4)) as dev:
        src, data = filled(dev, 64 * KiB)
        dst = dev.alloc(nq * per * 1024)
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        queues = [dev.queue(start=q * 1000) for q in range(nq)]
        tickets = [hq.post([Descriptor(rs.id, 1024 * i, rd.id, (hq.id * per + i) * 1024, 1024) for i in range(per)])
                   for hq in queues]
        for hq, t in zip(queues, tickets):
            assert hq.wait(t) == hq.id * 1000 + per
        assert dev.backend.counters().descriptors == nq * per
        for q in range(nq):
            assert dst.read(q * per * 1024, per * 1024) == data[: per * 1024]


def test_stop_holds_posted_work_and_start_runs_it():
    with Device(engine()) as dev:
        src, data = filled(dev, 8 * KiB)
        dst = dev.alloc(8 * KiB)
        dst.write(0, bytes(8 * KiB))
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = dev.queue()
        eng = dev.backend
        eng.stop()
        assert not eng.running
        ticket = q.post([Descriptor(rs.id, 0, rd.id, 0, 8 * KiB)])
        time.sleep(0.05)
        assert q.completed == 0 and dst.read(0, 8 * KiB) == bytes(8 * KiB)
        with pytest.raises(ArkdmaError, match="stopped"):
            eng.wait_idle(0.5)
        eng.start()
        assert q.wait(ticket) == 1 and dst.read(0, 8 * KiB) == data
        for _ in range(3):  # and again
            eng.stop()
            eng.start()
        assert q.wait(q.post([Descriptor(rs.id, 0, rd.id, 0, 16)])) == 2


def test_stats_count_what_the_thread_did():
    with Device(engine()) as dev:
        src, _ = filled(dev, 4096)
        dst = dev.alloc(4096)
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = dev.queue()
        before = dev.backend.stats()
        q.wait(q.post([Descriptor(rs.id, 64 * i, rd.id, 64 * i, 64) for i in range(50)]))
        s = dev.backend.stats().minus(before)
        assert s.issued == s.copies == 50 and s.drain_ns > 0 and s.polls >= s.drains >= 1
        assert s.completions >= 1 and s.api_calls == 0


def test_error_log_overflow_is_reported():
    with engine(num_queues=4, errlog_depth=2) as eng:
        comp = eng.alloc(4 * 64)
        eng.set_region(15, comp.addr, 4 * 64, Perm.WRITE)
        for q in range(4):
            eng.configure_queue(q, 15, 64 * q)
            eng.enable_queue(q)
            eng.write_slots(q, 0, Descriptor(3, 0, 3, 0, 1, cookie=q).pack())
            eng.ring(q, 1)
        eng.wait_idle()
        assert eng.errlog_overflow() and len(eng.error_log()) == 2 and eng.errlog_overflow()
        eng.clear_errlog_overflow()
        assert not eng.errlog_overflow()


def test_a_log_deeper_than_one_read_is_popped_whole_in_order():
    """The C API pops at most its capacity per call and leaves the rest; error_log() reads on until it is empty."""
    depth = 2 * ERRLOG_BATCH + 3
    with engine(num_queues=1, errlog_depth=depth) as eng:
        for start in range(depth):
            eng.disable_queue(0)
            eng.configure_queue(0, 9, 0, start)  # region 9 is not registered: the enable halts the queue
            eng.enable_queue(0)
        log = eng.error_log()
        assert [e.index for e in log] == list(range(depth)) and not eng.errlog_overflow()
        assert eng.error_log() == []


def test_pinning_the_thread_to_a_cpu():
    cpu = min(os.sched_getaffinity(0))
    with Device(engine(cpus=[cpu])) as dev:
        assert dev.backend.cpus == [cpu]
        src, data = filled(dev, 4096)
        dst = dev.alloc(4096)
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        q = dev.queue()
        q.wait(q.post(Descriptor(rs.id, 0, rd.id, 0, 4096)))
        assert dst.read(0, 4096) == data


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(slots=48), "power of two"),
        (dict(num_queues=0), "num_queues"),
        (dict(num_regions=129), "num_regions"),
        (dict(executor="gpu"), "executor must be one of"),
        (dict(streams_per_queue=0), "streams_per_queue"),
        (dict(errlog_depth=0), "errlog_depth"),
    ],
)
def test_bad_geometry_is_refused_with_the_reason(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SoftwareEngine(**{"executor": "host", **kwargs})


def test_bad_control_arguments_are_refused_with_the_reason():
    with engine(num_queues=2, num_regions=4, slots=8) as eng:
        with pytest.raises(ValueError, match="queue 2 does not exist"):
            eng.enable_queue(2)
        with pytest.raises(EngineArgumentError, match="region id 4 is outside"):
            eng.set_region(4, 0x1000, 64, Perm.READ)
        with pytest.raises(EngineArgumentError, match="permissions"):
            eng.set_region(0, 0x1000, 64, 4)
        with pytest.raises(EngineArgumentError, match="wraps"):
            eng.set_region(0, (1 << 64) - 8, 64, Perm.READ)
        with pytest.raises(ValueError, match="do not fit a window of 8"):
            eng.write_slots(0, 0, bytes(32 * 9))
        with pytest.raises(ValueError, match="32 bytes"):
            eng.write_slots(0, 0, bytes(33))
        with pytest.raises(ValueError, match="placement"):
            eng.alloc(64, "gpu")
        with pytest.raises(ValueError, match="must be 1.."):
            eng.alloc(0)
    with pytest.raises(EngineClosed, match="closed"):
        eng.ring(0, 1)
    for call in (eng.error_log, eng.errlog_overflow, eng.clear_errlog_overflow):
        with pytest.raises(EngineClosed, match="closed"):
            call()


def test_wait_idle_is_bounded():
    with engine() as eng:
        src = eng.alloc(1 << 20)
        dst = eng.alloc(64 << 20)
        eng.set_region(0, src.addr, src.size, Perm.READ)
        eng.set_region(1, dst.addr, dst.size, Perm.WRITE)
        comp = raw_engine_queue(eng, 0)
        eng.write_slots(0, 0, b"".join(Descriptor(0, 0, 1, i << 20, 1 << 20).pack() for i in range(64)))
        eng.ring(0, 64)
        with pytest.raises(EngineTimeout, match="still busy"):
            eng.wait_idle(timeout=0.0)
        eng.wait_idle()
        assert word(comp) == 64
        eng.wait_idle()


def test_registered_buffers_stay_alive_and_cannot_be_freed():
    with engine() as eng:
        buf = eng.alloc(4096)
        addr = buf.addr
        eng.set_region(3, addr + 64, 128, Perm.WRITE)
        with pytest.raises(ArkdmaError, match="backs region"):
            buf.free()
        del buf  # the engine still holds it: the region may be written at any time
        eng.configure_queue(0, 3, 0)
        eng.enable_queue(0)
        eng.clear_region(3)
        gone = eng.alloc(64)
        gone.free()
        eng.set_region(3, addr, 64, Perm.WRITE)  # still the same live buffer, and its owner again
        eng.clear_region(3)
