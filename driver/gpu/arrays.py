"""GPU arrays (CuPy, PyTorch, anything with __cuda_array_interface__ or DLPack) registered as regions.

A region must be one contiguous span of memory the engine can reach: GPU memory of this or a peer
GPU, or pinned host memory. The registered array is kept alive until it is unregistered here (or
its Device goes), so the engine never copies into memory that was given back.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from driver.abi import Perm
from driver.device import Device
from driver.errors import RegionError
from driver.regions import RegionHandle

# DLPack device types (dlpack.h)
DL_CUDA, DL_CUDA_HOST, DL_CUDA_MANAGED = 2, 3, 13
DL_NAMES = {1: "CPU", DL_CUDA: "CUDA", DL_CUDA_HOST: "CUDA pinned host", 4: "OpenCL", 7: "Vulkan", 8: "Metal",
            10: "ROCm", DL_CUDA_MANAGED: "CUDA managed"}


@dataclass(frozen=True)
class Span:
    """Where an array's bytes are: one contiguous range."""

    ptr: int
    nbytes: int
    readonly: bool
    kind: str  # "device" (GPU memory), "host" (pinned host memory) or "managed"
    device_id: int  # the GPU that holds it (-1 for host memory)


def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int) -> bool:
    if strides is None:
        return True
    expect = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n > 1 and s != expect:
            return False
        expect *= n
    return True


def _from_cai(obj, classify) -> Span:
    cai = obj.__cuda_array_interface__
    ptr, readonly = cai["data"]
    shape = tuple(cai["shape"])
    itemsize = int(cai["typestr"][2:])
    if not _contiguous(shape, cai.get("strides"), itemsize):
        raise RegionError(
            f"the array (shape {shape}, strides {cai.get('strides')}) is not contiguous: a region is one span "
            "of bytes; register a contiguous copy (cupy.ascontiguousarray / tensor.contiguous())"
        )
    n = itemsize
    for d in shape:
        n *= d
    if n == 0:
        raise RegionError("the array is empty: a region must hold at least one byte")
    kind, device_id = classify(ptr)
    return Span(ptr, n, bool(readonly), kind, device_id)


def _cuda_pointer_kind(ptr: int) -> tuple[str, int]:
    try:
        from cupy.cuda import runtime
    except ImportError:
        return "device", -1
    try:
        attrs = runtime.pointerGetAttributes(ptr)
    except runtime.CUDARuntimeError as exc:
        raise RegionError(f"CUDA does not know the pointer {ptr:#x} ({exc}); register GPU or pinned memory") from exc
    kinds = {runtime.memoryTypeDevice: "device", runtime.memoryTypeHost: "host", runtime.memoryTypeManaged: "managed"}
    if attrs.type not in kinds:
        raise RegionError(f"{ptr:#x} is pageable host memory: pin it (cudaHostRegister) or allocate pinned memory")
    return kinds[attrs.type], attrs.device if attrs.type != runtime.memoryTypeHost else -1


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


def _from_dlpack(obj) -> Span:
    capsule = obj.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    # DLManagedTensor starts with its DLTensor. The capsule stays unconsumed: its destructor frees it.
    t = _DLTensor.from_address(get(capsule, b"dltensor"))
    dev = t.device.device_type
    if dev not in (DL_CUDA, DL_CUDA_HOST, DL_CUDA_MANAGED):
        raise RegionError(
            f"the array lives in {DL_NAMES.get(dev, f'device type {dev}')} memory; the engine reaches CUDA GPU "
            "memory and pinned host memory only: move it to the GPU (or pin it) first"
        )
    if t.dtype.lanes != 1 or t.dtype.bits % 8:
        raise RegionError(f"DLPack dtype with {t.dtype.bits} bits x {t.dtype.lanes} lanes is not a byte array")
    itemsize = t.dtype.bits // 8
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] * itemsize for i in range(t.ndim)) if t.strides else None
    if not _contiguous(shape, strides, itemsize):
        raise RegionError(f"the array (shape {shape}) is not contiguous: a region is one span; make it contiguous")
    n = itemsize
    for d in shape:
        n *= d
    kind = {DL_CUDA: "device", DL_CUDA_HOST: "host", DL_CUDA_MANAGED: "managed"}[dev]
    return Span(t.data + t.byte_offset, n, False, kind, t.device.device_id if dev == DL_CUDA else -1)


def span_of(obj, classify=None) -> Span:
    """The bytes behind a GPU array: through __cuda_array_interface__, else DLPack. `classify(ptr)` says
    (kind, device id) of a pointer; by default CUDA's pointer attributes do."""
    if hasattr(obj, "__cuda_array_interface__"):
        span = _from_cai(obj, classify or _cuda_pointer_kind)
    elif hasattr(obj, "__dlpack__"):
        span = _from_dlpack(obj)
    else:
        raise RegionError(
            f"{type(obj).__name__} has neither __cuda_array_interface__ nor __dlpack__: pass a CuPy array, a "
            "PyTorch CUDA tensor, or another GPU array"
        )
    if span.kind == "managed":
        raise RegionError("managed (unified) memory can migrate while the engine copies; register cudaMalloc'ed "
                          "GPU memory or pinned host memory instead")
    if span.nbytes <= 0:
        raise RegionError("the array is empty: a region must hold at least one byte")
    return span


def enable_peer_access(device_id: int, peer_id: int) -> None:
    """Let `device_id` reach `peer_id`'s memory directly (idempotent); RegionError when it cannot."""
    from cupy.cuda import runtime

    if device_id == peer_id:
        return
    if not runtime.deviceCanAccessPeer(device_id, peer_id):
        raise RegionError(f"GPU {device_id} cannot reach GPU {peer_id}'s memory as a peer (no P2P path)")
    prev = runtime.getDevice()
    runtime.setDevice(device_id)
    try:
        runtime.deviceEnablePeerAccess(peer_id)
    except runtime.CUDARuntimeError as exc:
        if "PeerAccessAlreadyEnabled" not in str(exc):
            raise
    finally:
        runtime.setDevice(prev)


def register_array(device: Device, obj, perms: Perm | None = None, engine_gpu: int = 0) -> RegionHandle:
    """Register a GPU array's bytes as a region (READ|WRITE, or READ for a read-only array). Memory of
    another GPU is a peer region: peer access from `engine_gpu` is enabled first."""
    span = span_of(obj)
    if perms is None:
        perms = Perm.READ if span.readonly else Perm.READ | Perm.WRITE
    if span.readonly and perms & Perm.WRITE:
        raise RegionError("the array is read-only: it cannot be a destination (register it with perms=Perm.READ)")
    if span.kind == "device" and span.device_id >= 0:
        enable_peer_access(engine_gpu, span.device_id)
    # span_of() checked the pointer with CUDA (device or pinned memory, not managed); the region keeps
    # the array alive until it is unregistered.
    return device.regions.register_unsafe(span.ptr, span.nbytes, perms=perms, keep=obj)


def unregister_array(device: Device, region: RegionHandle | int) -> None:
    """Unregister a region made by register_array() and let its array go."""
    device.regions.unregister(region)
