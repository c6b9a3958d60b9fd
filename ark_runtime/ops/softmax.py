"""Softmax over the last axis (rows.cuh's softmax_rows)."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import Op, Tensor
from ark_runtime.ops.blocks import row_smem, row_tiles, row_variant
from ark_runtime.ops.spec import Built, OpSpec, arity, no_attrs, require_float


class Softmax(OpSpec):
    kind = "softmax"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("softmax", inputs, 1)
        no_attrs("softmax", attrs)
        require_float("softmax", inputs[0])
        return Built(inputs[0].shape, inputs[0].dtype)

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        x = args[0]
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def variant(self, model, op: Op, device) -> dict:
        return row_variant("softmax_rows", op, model, device)

    def tiles(self, tm, op: Op, v: dict) -> None:
        row_tiles(tm)

    def emit(self, e, op: Op, v: dict) -> str:
        row_smem(e)
        out, x = e.tensor(op.output), e.tensor(op.inputs[0])
        return (f"ark::softmax_rows<{e.ctype(out)}, {x.cols}, {v['team']}>({e.ptr(x.id)}, {e.ptr(out.id, const=False)}, "
                "r0, r1, smem);")


SPEC = Softmax()
