"""Rotary embedding of x [..., S, D] with cos/sin [S, D/2], columns 2j and 2j+1 turned together (elementwise.cuh's
rope_tile)."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import ModelError, Op, Tensor
from ark_runtime.ops.blocks import elementwise_tiles
from ark_runtime.ops.spec import Built, OpSpec, arity, no_attrs, require_float


class Rope(OpSpec):
    kind = "rope"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("rope", inputs, 3)
        no_attrs("rope", attrs)
        x, cos, sin = inputs
        require_float("rope", x)
        if len(x.shape) < 2 or x.shape[-1] % 2:
            raise ModelError(f"rope: x must be [..., S, D] with D even, not {x.shape}")
        want = (x.shape[-2], x.shape[-1] // 2)
        if cos.shape != want or sin.shape != want:
            raise ModelError(f"rope: cos and sin must be {want} for x {x.shape}, not {cos.shape} and {sin.shape}")
        if cos.dtype != x.dtype or sin.dtype != x.dtype:
            raise ModelError(f"rope: cos and sin must be {x.dtype} like x, not {cos.dtype} and {sin.dtype}")
        return Built(x.shape, x.dtype)

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        x, cos, sin = args
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x1 * sin + x2 * cos
        return out

    def variant(self, model, op: Op, device) -> dict:
        return {"template": "rope_tile"}

    def tiles(self, tm, op: Op, v: dict) -> None:
        elementwise_tiles(tm, pairs=True)

    def emit(self, e, op: Op, v: dict) -> str:
        out, x = e.tensor(op.output), e.tensor(op.inputs[0])
        ptrs = ", ".join(e.ptr(i) for i in op.inputs)
        return (f"ark::rope_tile<{e.ctype(out)}>({ptrs}, {e.ptr(out.id, const=False)}, {x.shape[-2]}, {out.cols}, "
                "r0, r1, c0, c1);")


SPEC = Rope()
