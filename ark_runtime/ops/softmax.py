"""Softmax over the last axis (rows.cuh's softmax_rows)."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import Op, Tensor
from ark_runtime.ops.blocks import RowSpec
from ark_runtime.ops.spec import Built, arity, no_attrs, require_float


class Softmax(RowSpec):
    kind = "softmax"
    template = "softmax_rows"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("softmax", inputs, 1)
        no_attrs("softmax", attrs)
        require_float("softmax", inputs[0])
        return Built(inputs[0].shape, inputs[0].dtype)

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        x = args[0]
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def row_call(self, e, op: Op, v: dict, x, out) -> str:
        return (f"ark::softmax_rows<{e.ctype(out)}, {x.cols}, {v['team']}>({e.ptr(x.id)}, {e.ptr(out.id, const=False)}, "
                "r0, r1, smem);")


SPEC = Softmax()
