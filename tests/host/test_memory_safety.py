"""Memory safety of the host API on the software engine, whose memory is this process's memory.

Each misuse here once corrupted memory (a size wrapping in native code, a region over memory another
device freed, a region at a raw address, a view read after close, a descriptor reaching the device's
completion words). Misuses that could crash run in a child process, where a crash is the failure.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from driver.abi import Perm
from driver.descriptor import Descriptor
from driver.device import Device
from driver.errors import ArkdmaError, RegionError
from host.engine import SoftwareEngine
from host.memory import EngineClosed
from host.native import EngineArgumentError

ROOT = Path(__file__).resolve().parents[2]


def run_isolated(body: str) -> str:
    """Run `body` in a fresh interpreter with a software-host Device `dev`; return its output. A crash
    (signal, heap corruption, non-zero exit) fails the calling test with what the child printed."""
    code = "from driver.device import Device\nfrom host.engine import SoftwareEngine\n" + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"child exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture
def dev():
    with Device(SoftwareEngine("host", num_queues=4, slots=16, num_regions=8)) as device:
        yield device


# --- 1: sizes are checked against their C types before they reach native code ------------------------
@pytest.mark.parametrize("size", [1 << 64, (1 << 64) + 4096, 1 << 63, (1 << 48) + 1, 0, -1])
def test_alloc_refuses_sizes_that_do_not_fit(dev, size):
    with pytest.raises(ValueError, match="buffer size must be 1.."):
        dev.alloc(size)


@pytest.mark.parametrize("size", [4096.0, "4096", None, True, np.float64(64)])
def test_alloc_refuses_sizes_that_are_not_ints(dev, size):
    with pytest.raises(TypeError, match="must be an int"):
        dev.alloc(size)


def test_a_wrapped_size_never_reaches_the_allocator():
    out = run_isolated("""
        with Device(SoftwareEngine("host")) as dev:
            try:
                buf = dev.alloc(2**64 + 4096)
            except ValueError as exc:
                print("refused:", exc)
            else:
                buf.write(0, bytes(1 << 20))  # the heap corruption the wrapped size allowed
    """)
    assert "refused" in out


@pytest.mark.parametrize("call", [
    lambda e: e.ring(0, 1.5),
    lambda e: e.set_region(0, 2**64, 64, 1),
    lambda e: e.set_region(0, 0x1000, 2**64, 1),
    lambda e: e.configure_queue(0, 0, 2**64),
    lambda e: e.disable_queue(0, timeout=float("nan")),
    lambda e: e.disable_queue(0, timeout=1e30),
    lambda e: e.disable_queue(0, timeout=-1),
])
def test_native_arguments_are_checked_against_their_c_types(call):
    with SoftwareEngine("host", num_queues=2, slots=8, num_regions=4) as eng:
        with pytest.raises((EngineArgumentError, ValueError, TypeError)):
            call(eng)


def test_an_absurd_engine_timeout_is_refused_at_construction():
    with pytest.raises(EngineArgumentError, match="timeout"):
        SoftwareEngine("host", timeout=1e30)


# --- 2: a region keeps its memory alive, or refuses memory it cannot keep ---------------------------
def test_a_buffer_of_another_device_is_refused(dev):
    with Device(SoftwareEngine("host")) as other:
        foreign = other.alloc(4096)
        with pytest.raises(RegionError, match="not allocated by engine software-host"):
            dev.register(foreign)
        with pytest.raises(RegionError, match="not inside memory engine software-host allocated"):
            dev.register(addr=foreign.addr, size=4096)


def test_a_freed_buffer_is_refused(dev):
    buf = dev.alloc(4096)
    buf.free()
    with pytest.raises(RegionError, match="or freed"):
        dev.register(buf)


def test_a_region_keeps_its_buffer_alive_after_the_last_python_reference(dev):
    r = dev.register(dev.alloc(4096), perms=Perm.WRITE)  # no reference kept by the caller
    src = dev.alloc(64)
    src.write(0, b"\x5a" * 64)
    rs = dev.register(src, perms=Perm.READ)
    import gc

    gc.collect()
    q = dev.queue()
    q.wait(q.post(Descriptor(rs.id, 0, r.id, 100, 64)))
    owner = dev.backend.buffer_at(r.addr, r.size)
    assert owner is not None and owner.read(100, 64) == b"\x5a" * 64


def test_copies_never_land_in_memory_another_device_freed():
    out = run_isolated("""
        from driver.errors import RegionError
        a, b = Device(SoftwareEngine("host")), Device(SoftwareEngine("host"))
        victim = a.alloc(1 << 16)
        try:
            b.register(victim)
        except RegionError as exc:
            print("refused:", exc)
        a.close()
        b.close()
    """)
    assert "refused" in out


# --- 3: raw addresses only behind the explicit unsafe call --------------------------------------------
@pytest.mark.parametrize("addr", [0x1000, 0, 2**63, 2**64 - 64])
def test_a_raw_address_is_refused(dev, addr):
    with pytest.raises(RegionError, match="register_unsafe"):
        dev.regions.register(addr=addr, size=64)


def test_a_copy_to_address_0x1000_is_refused_before_it_can_segfault():
    out = run_isolated("""
        from driver.errors import RegionError
        with Device(SoftwareEngine("host")) as dev:
            try:
                dev.regions.register(addr=0x1000, size=4096)
            except RegionError:
                print("refused")
    """)
    assert "refused" in out


def test_an_address_range_inside_an_engine_buffer_is_accepted_and_pins_it(dev):
    buf = dev.alloc(8192)
    r = dev.regions.register(addr=buf.addr + 4096, size=4096, perms=Perm.WRITE)
    assert (r.addr, r.size) == (buf.addr + 4096, 4096)
    with pytest.raises(ArkdmaError, match="backs region"):
        buf.free()


def test_host_memory_with_the_buffer_protocol_is_registered_and_kept(dev):
    target = bytearray(256)
    src = dev.alloc(64)
    src.write(0, bytes(range(64)))
    rd = dev.regions.register_host(target, perms=Perm.WRITE)
    rs = dev.register(src, perms=Perm.READ)
    q = dev.queue()
    q.wait(q.post(Descriptor(rs.id, 0, rd.id, 8, 64)))
    assert target[8:72] == bytes(range(64)) and target[:8] == bytes(8) and target[72:] == bytes(184)
    with pytest.raises(BufferError):
        target.extend(b"x" * 4096)  # a resize would move the bytes under the region
    dev.regions.unregister(rd)
    target.extend(b"x")


def test_read_only_host_memory_cannot_be_a_destination(dev):
    with pytest.raises(RegionError, match="read-only"):
        dev.regions.register_host(b"constant bytes")
    r = dev.regions.register_host(b"constant bytes", perms=Perm.READ)
    assert r.size == 14


def test_objects_without_bytes_are_refused(dev):
    with pytest.raises(RegionError, match="buffer protocol"):
        dev.regions.register_host(object())
    with pytest.raises(RegionError, match="not contiguous"):
        dev.regions.register_host(np.zeros((8, 8))[:, ::2])
    with pytest.raises(RegionError, match="empty"):
        dev.regions.register_host(bytearray())


def test_register_unsafe_is_the_explicit_way_to_name_an_address(dev):
    keep = np.zeros(512, np.uint8)
    r = dev.regions.register_unsafe(keep.ctypes.data, keep.nbytes, perms=Perm.WRITE, keep=keep)
    src = dev.alloc(16)
    src.write(0, b"\x11" * 16)
    rs = dev.register(src, perms=Perm.READ)
    q = dev.queue()
    q.wait(q.post(Descriptor(rs.id, 0, r.id, 0, 16)))
    assert bytes(keep[:16]) == b"\x11" * 16 and not keep[16:].any()


# --- 4: views keep their memory alive ---------------------------------------------------------------
def test_a_view_read_after_close_sees_the_last_bytes():
    out = run_isolated("""
        dev = Device(SoftwareEngine("host"))
        buf = dev.alloc(1 << 20)
        buf.write(0, b"\\x42" * 16)
        view = buf.view()
        del buf
        dev.close()
        print("read", int(view[:16].sum()), int(view[(1 << 20) - 1]))
        view[0] = 7  # still valid memory: the engine's close left it to the view
        del view
        print("ok")
    """)
    assert "read 1056 0" in out and "ok" in out


def test_a_viewed_buffer_cannot_be_freed_and_a_freed_one_cannot_be_viewed(dev):
    buf = dev.alloc(4096)
    view = buf.view()
    with pytest.raises(ArkdmaError, match="live view"):
        buf.free()
    del view
    buf.free()
    with pytest.raises(EngineClosed, match="freed"):
        buf.view()
    with pytest.raises(EngineClosed, match="freed"):
        buf.read(0, 8)


# --- 5: the device's completion words are out of users' reach ----------------------------------------
def test_completion_words_get_a_reserved_id_even_when_queue_comes_first(dev):
    q = dev.queue()
    internal = dev.regions.internal_ids
    assert internal == {dev.geometry.num_regions - 1}
    assert len(dev.regions) == 0 and list(dev.regions) == []
    buf = dev.alloc(4096)
    r = dev.register(buf)
    assert r.id == 0
    # a descriptor that leaves its destination at the default names region 0: the user's, not the words
    q.wait(q.post(Descriptor(src_region=r.id, src_offset=0, dst_offset=2048, length=64)))
    assert q.completed == 1


@pytest.mark.parametrize("field", ["dst_region", "src_region"])
def test_a_descriptor_naming_the_completion_words_is_refused(dev, field):
    q = dev.queue()
    buf = dev.alloc(4096)
    r = dev.register(buf)
    (internal,) = dev.regions.internal_ids
    fields = {"src_region": r.id, "dst_region": r.id, "dst_offset": 1024, "length": 8}
    fields[field] = internal
    with pytest.raises(ArkdmaError, match="completion words"):
        q.post(Descriptor(**fields))
    with pytest.raises(RegionError, match="completion words"):
        dev.regions.unregister(internal)
    with pytest.raises(RegionError, match="taken"):
        dev.register(dev.alloc(64), region=internal)
    assert q.completed == 0


def test_posting_to_a_stopped_queue_says_so(dev):
    q = dev.queue()
    q.stop()
    with pytest.raises(ArkdmaError, match="was stopped"):
        q.post(Descriptor())
    with pytest.raises(ArkdmaError, match="was stopped"):
        q.wait()
