"""Host values of the model's dtypes: NumPy arrays to the bytes a tensor holds and back. bf16 has no NumPy
dtype: its bytes are the upper half of fp32, rounded to nearest even."""

from __future__ import annotations

import numpy as np

from ark_runtime.model import ModelError, Tensor

NUMPY = {"fp32": np.float32, "fp16": np.float16, "int32": np.int32}


def to_bits(t: Tensor, value) -> np.ndarray:
    """`value` (anything NumPy takes, of t's shape) as t's bytes; ModelError naming the tensor when it does not fit."""
    a = np.asarray(value)
    if a.shape != t.shape:
        raise ModelError(f"tensor {t.name} is {t.shape}; the value given is {a.shape}")
    if t.dtype == "int32":
        if not np.issubdtype(a.dtype, np.integer):
            raise ModelError(f"tensor {t.name} holds int32 ids; the value given is {a.dtype}")
        if a.size and (a.min() < -(1 << 31) or a.max() >= 1 << 31):
            raise ModelError(f"tensor {t.name}: a value does not fit in int32")
        return np.ascontiguousarray(a, np.int32)
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise ModelError(f"tensor {t.name} is {t.dtype}; the value given is {a.dtype}")
    if t.dtype == "bf16":
        bits = np.ascontiguousarray(a, np.float32).view(np.uint32)
        rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
        nan = np.isnan(a.astype(np.float32))
        out = (rounded >> np.uint32(16)).astype(np.uint16)
        out[nan] = 0x7FC0
        return out
    return np.ascontiguousarray(a, NUMPY[t.dtype])


def from_bits(t: Tensor, raw: np.ndarray) -> np.ndarray:
    """t's bytes (any 1-byte or matching view) as NumPy: float32 for bf16, else t's own dtype."""
    raw = np.ascontiguousarray(raw).view(np.uint8)
    if t.dtype == "bf16":
        return (raw.view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32).reshape(t.shape)
    return raw.view(NUMPY[t.dtype]).reshape(t.shape)
