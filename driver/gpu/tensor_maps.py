"""Tensor maps (CUtensorMap) for the TMA loads of a kernel: a 2-D tile of a row-major matrix of 2-byte elements,
copied into shared memory with the 128-byte swizzle (cuTensorMapEncodeTiled, CUDA driver API). The map is 128
bytes the kernel reads from global memory; it holds the matrix's address, so it is made once that is known."""

from __future__ import annotations

import ctypes

import numpy as np

from driver.errors import ArkdmaError
from driver.gpu import libcuda

TENSOR_MAP_BYTES = 128  # sizeof(CUtensorMap), 64-byte aligned
SWIZZLE_BYTES = 128  # CU_TENSOR_MAP_SWIZZLE_128B: a box row is at most this long
_UINT16, _INTERLEAVE_NONE, _SWIZZLE_128B, _L2_PROMOTION_256B, _FILL_ZERO = 1, 0, 3, 3, 0
_MAX_BOX = 256


class TensorMapError(ArkdmaError):
    """A tensor map cannot describe this matrix or box; the message says which rule it breaks."""


def _encoder():
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    try:
        return libcuda.functions(cuTensorMapEncodeTiled=(
            (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p, ctypes.c_int,
             ctypes.c_int, ctypes.c_int, ctypes.c_int), ctypes.c_int)).cuTensorMapEncodeTiled
    except libcuda.DriverLibraryError as exc:
        raise TensorMapError(str(exc)) from None


def check(address: int, rows: int, cols: int, box_rows: int, box_cols: int, element_bytes: int = 2) -> None:
    """TensorMapError unless TMA can copy box_rows x box_cols tiles of the rows x cols matrix at `address`."""
    what = f"matrix {rows} x {cols} at {address:#x}, box {box_rows} x {box_cols}"
    for name, value in (("rows", rows), ("cols", cols), ("box_rows", box_rows), ("box_cols", box_cols)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TensorMapError(f"{what}: {name} must be a positive int, not {value!r}")
    if address % 16:
        raise TensorMapError(f"{what}: TMA needs the matrix 16-byte aligned; allocate it aligned (CuPy and PyTorch "
                             "allocations are) or do not bind a view at an odd offset")
    if cols * element_bytes % 16:
        raise TensorMapError(f"{what}: a row of {cols * element_bytes} bytes is not a multiple of 16")
    if box_rows > _MAX_BOX or box_cols * element_bytes > SWIZZLE_BYTES:
        raise TensorMapError(f"{what}: a box is at most {_MAX_BOX} rows of {SWIZZLE_BYTES} bytes with the 128-byte "
                             "swizzle")
    if rows >= 2 ** 32 or cols >= 2 ** 32:
        raise TensorMapError(f"{what}: a dimension is at most 2^32 - 1")


def encode(address: int, rows: int, cols: int, box_rows: int, box_cols: int) -> np.ndarray:
    """The 128-byte map (uint8) of a row-major rows x cols matrix of 2-byte elements at GPU address `address`,
    tiled in box_rows x box_cols boxes with the 128-byte swizzle; what lies past the matrix reads as zeros."""
    check(address, rows, cols, box_rows, box_cols)
    out = np.zeros(TENSOR_MAP_BYTES + 64, np.uint8)
    at = (-out.ctypes.data) % 64  # the map's 64-byte alignment
    dims = (ctypes.c_uint64 * 2)(cols, rows)
    strides = (ctypes.c_uint64 * 1)(cols * 2)
    box = (ctypes.c_uint32 * 2)(box_cols, box_rows)
    steps = (ctypes.c_uint32 * 2)(1, 1)
    rc = _encoder()(out.ctypes.data + at, _UINT16, 2, ctypes.c_void_p(address), dims, strides, box, steps,
                    _INTERLEAVE_NONE, _SWIZZLE_128B, _L2_PROMOTION_256B, _FILL_ZERO)
    if rc != 0:
        raise TensorMapError(f"cuTensorMapEncodeTiled for a {rows} x {cols} matrix at {address:#x}, box {box_rows} x "
                             f"{box_cols}, failed with {libcuda.error_name(rc)}")
    return out[at:at + TENSOR_MAP_BYTES].copy()
