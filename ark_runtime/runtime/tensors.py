"""The memory behind each of a model's tensors: an array the caller bound (CuPy, PyTorch, anything with
__cuda_array_interface__ or DLPack; checked for dtype, size, placement, alignment and GPU, used without a copy), else
new GPU memory or pinned host memory."""

from __future__ import annotations

import ctypes
from typing import NamedTuple

from ark_runtime.runtime.faults import LoopError

TENSOR_ALIGN = 16  # bytes: where every tensor the kernel reads or writes must start
DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "int32": "int32"}


class TensorMemory(NamedTuple):
    ptr: int  # the GPU address the kernel uses
    owner: object  # what keeps the memory alive
    kind: str  # "device" or "host"


def dtype_of(obj) -> str | None:
    """The model dtype an array holds ("fp32", ...), None for one a model has no name for."""
    name = str(getattr(obj, "dtype", "")).replace("torch.", "")
    return DTYPES.get(name)


def tensor_memory(t, given, device_id: int) -> TensorMemory:
    """Tensor t's memory: the bound array `given` (LoopError naming what does not fit), or new memory when None."""
    import cupy

    if given is not None:
        return _bound(t, given, device_id)
    if t.placement == "host":
        mem = cupy.cuda.alloc_pinned_memory(t.nbytes)
        ctypes.memset(mem.ptr, 0, t.nbytes)  # zeros, as on the device: CuPy's pinned pool hands back used blocks
        return TensorMemory(cupy.cuda.runtime.pointerGetAttributes(mem.ptr).devicePointer, mem, "host")
    arr = cupy.zeros(t.nbytes, cupy.uint8)
    return TensorMemory(arr.data.ptr, arr, "device")


def _bound(t, given, device_id: int) -> TensorMemory:
    from driver.gpu.arrays import span_of

    try:
        span = span_of(given)
    except Exception as exc:
        raise LoopError(f"bind[{t.name!r}]: {exc}") from None
    dtype = dtype_of(given)
    if dtype != t.dtype and not (t.dtype == "bf16" and str(getattr(given, "dtype", "")) == "uint16"):
        raise LoopError(f"bind[{t.name!r}] is {getattr(given, 'dtype', '?')}; tensor {t.name} is {t.dtype}")
    if span.nbytes != t.nbytes:
        raise LoopError(f"bind[{t.name!r}] holds {span.nbytes} bytes; tensor {t.name} {t.shape} needs {t.nbytes}")
    want = "device" if t.placement == "device" else "host"
    if span.kind != want:
        raise LoopError(f"bind[{t.name!r}] is {span.kind} memory; tensor {t.name} is placed on the {want}")
    if span.ptr % TENSOR_ALIGN:
        raise LoopError(f"bind[{t.name!r}] starts at {span.ptr:#x}, not on a {TENSOR_ALIGN}-byte boundary: the "
                        f"kernel loads tensors in {TENSOR_ALIGN}-byte pieces (vector loads, cp.async, TMA); "
                        "bind an array that starts on one (fresh CuPy and PyTorch allocations do), not a view "
                        "at an offset")
    if span.kind == "device" and span.device_id != device_id:
        raise LoopError(f"bind[{t.name!r}] is on GPU {span.device_id}; this runtime runs on GPU {device_id}")
    return TensorMemory(span.ptr, given, span.kind)


def _in_place(model, a, b) -> bool:
    """Whether tensors a and b on the same bytes are an in-place elementwise update: one an input that only the
    elementwise op writing the other reads, at its shape and dtype (each tile then reads its region before writing it;
    the value carries over to the next iteration)."""
    from ark_runtime.ops import spec

    for src, out in ((a, b), (b, a)):
        if src.producer is not None or out.producer is None or (src.shape, src.dtype) != (out.shape, out.dtype):
            continue
        op = model.ops[out.producer]
        readers = [o for o in model.ops if src.id in o.inputs]
        if (spec(op.kind).elementwise or op.kind == "fused") and readers == [op]:
            return True
    return False


def overlapping_binds(model, memories: list[TensorMemory], bound: set[str]) -> str | None:
    """Why the bound arrays cannot be used, where two of them share bytes and the kernel writes either (an op's
    output): what one tile writes would change what another reads or writes. Inputs may share memory (tied weights:
    the kernel only reads them), and an elementwise op may write over the one input it alone reads, byte for byte
    (`_in_place`: state carried from one iteration to the next)."""
    spans = sorted(((memories[t.id].ptr, memories[t.id].ptr + t.nbytes, t) for t in model.tensors
                    if t.name in bound and t.nbytes), key=lambda s: s[:2])
    active: list[tuple[int, int, object]] = []  # spans that reach past the start of the one looked at
    for b0, b1, b in spans:
        active = [a for a in active if a[1] > b0]
        for a0, a1, a in active:
            if (a.producer is not None or b.producer is not None) and not (
                    (a0, a1) == (b0, b1) and _in_place(model, a, b)):
                return (f"bind[{a.name!r}] and bind[{b.name!r}] share bytes ({a0:#x}..{a1:#x} and {b0:#x}..{b1:#x}) "
                        f"and the kernel writes {a.name if a.producer is not None else b.name}: bind separate arrays")
        active.append((b0, b1, b))
    return None
