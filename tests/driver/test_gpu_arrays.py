"""GPU arrays as regions, checked without a GPU: spans through __cuda_array_interface__ and DLPack,
refusals (CPU memory, managed memory, gaps, empty, read-only as a destination), and the keep-alive."""

from __future__ import annotations

import ctypes
import gc
import weakref

import numpy as np
import pytest

from driver.abi import Perm
from driver.device import Device
from driver.errors import RegionError
from driver.gpu import arrays
from driver.reference_engine import ReferenceEngine


class FakeCuda:
    """An object that says it is GPU memory through __cuda_array_interface__."""

    def __init__(self, ptr=0x7F00_0000_0000, shape=(1024,), typestr="|u1", strides=None, readonly=False):
        self.__cuda_array_interface__ = {"data": (ptr, readonly), "shape": shape, "typestr": typestr,
                                         "strides": strides, "version": 3}


def device_kind(ptr):
    return "device", 0


def test_span_through_cuda_array_interface():
    s = arrays.span_of(FakeCuda(shape=(16, 8), typestr="<f4"), classify=device_kind)
    assert (s.ptr, s.nbytes, s.readonly, s.kind) == (0x7F00_0000_0000, 16 * 8 * 4, False, "device")


def test_row_major_strides_are_contiguous_and_gaps_are_refused():
    ok = arrays.span_of(FakeCuda(shape=(4, 8), typestr="<u2", strides=(16, 2)), classify=device_kind)
    assert ok.nbytes == 64
    with pytest.raises(RegionError, match="not contiguous"):
        arrays.span_of(FakeCuda(shape=(4, 8), typestr="<u2", strides=(32, 2)), classify=device_kind)
    with pytest.raises(RegionError, match="not contiguous"):  # a transposed view
        arrays.span_of(FakeCuda(shape=(4, 8), typestr="<u2", strides=(2, 8)), classify=device_kind)


def test_empty_and_managed_and_unknown_objects_are_refused():
    with pytest.raises(RegionError, match="empty"):
        arrays.span_of(FakeCuda(shape=(0,)), classify=device_kind)
    with pytest.raises(RegionError, match="managed"):
        arrays.span_of(FakeCuda(), classify=lambda p: ("managed", 0))
    with pytest.raises(RegionError, match="neither __cuda_array_interface__ nor __dlpack__"):
        arrays.span_of(object())


def test_cpu_memory_through_dlpack_is_refused():
    with pytest.raises(RegionError, match="CPU memory"):
        arrays.span_of(np.zeros(64, dtype=np.uint8))


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", arrays._DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class FakeDLPack:
    """A DLPack producer whose capsule describes CUDA memory that does not exist."""

    def __init__(self, shape, strides=None, device_type=arrays.DL_CUDA, bits=32, offset=0):
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (ctypes.c_int64 * len(shape))(*strides) if strides else None
        t = arrays._DLTensor(0x7E00_0000_0000, arrays._DLDevice(device_type, 1), len(shape),
                             arrays._DLDataType(2, bits, 1), self.shape,
                             ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64)) if strides else None, offset)
        self.managed = _Managed(t, None, None)

    def __dlpack__(self, **kw):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self.managed), b"dltensor", None)


def test_span_through_dlpack():
    s = arrays.span_of(FakeDLPack((8, 4), offset=256))
    assert (s.ptr, s.nbytes, s.kind, s.device_id) == (0x7E00_0000_0000 + 256, 8 * 4 * 4, "device", 1)
    pinned = arrays.span_of(FakeDLPack((10,), device_type=arrays.DL_CUDA_HOST, bits=8))
    assert (pinned.kind, pinned.nbytes, pinned.device_id) == ("host", 10, -1)
    with pytest.raises(RegionError, match="not contiguous"):
        arrays.span_of(FakeDLPack((8, 4), strides=(1, 8)))
    with pytest.raises(RegionError, match="ROCm"):
        arrays.span_of(FakeDLPack((8,), device_type=10))


@pytest.fixture
def device(monkeypatch):
    monkeypatch.setattr(arrays, "_cuda_pointer_kind", lambda ptr: ("host", -1))
    with Device(ReferenceEngine()) as dev:
        yield dev


def test_register_array_gives_perms_from_readonly_and_keeps_the_array(device):
    rw = FakeCuda(ptr=0x1000_0000, shape=(4096,))
    ro = FakeCuda(ptr=0x2000_0000, shape=(4096,), readonly=True)
    h = arrays.register_array(device, rw)
    assert (h.addr, h.size, h.perms) == (0x1000_0000, 4096, Perm.READ | Perm.WRITE)
    assert arrays.register_array(device, ro).perms == Perm.READ
    with pytest.raises(RegionError, match="read-only"):
        arrays.register_array(device, FakeCuda(ptr=0x3000_0000, readonly=True), Perm.WRITE)
    alive = weakref.ref(rw)
    del rw
    gc.collect()
    assert alive() is not None, "a registered array must stay alive while its region exists"
    arrays.unregister_array(device, h)
    gc.collect()
    assert alive() is None and len(device.regions) == 1


def test_overlapping_arrays_are_refused(device):
    arrays.register_array(device, FakeCuda(ptr=0x1000_0000, shape=(4096,)))
    with pytest.raises(RegionError, match="overlaps region"):
        arrays.register_array(device, FakeCuda(ptr=0x1000_0800, shape=(4096,)))
