"""RMSNorm over the last axis, scaled by its weight (rows.cuh's norm_rows without the mean and the bias)."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import Op, Tensor
from ark_runtime.ops.blocks import RowSpec
from ark_runtime.ops.spec import Built, arity, eps_value, no_attrs, norm_params


class RmsNorm(RowSpec):
    kind = "rmsnorm"
    template = "norm_rows"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("rmsnorm", inputs, 2)
        no_attrs("rmsnorm", attrs, ("eps",))
        norm_params("rmsnorm", *inputs)
        return Built(inputs[0].shape, inputs[0].dtype, {"eps": eps_value(attrs.get("eps", 1e-6))})

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        x, w = args
        return x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + op.attr("eps")) * w

    def row_call(self, e, op: Op, v: dict, x, out) -> str:
        return (f"ark::norm_rows<{e.ctype(out)}, false, {x.cols}, {v['team']}>({e.ptr(x.id)}, {e.ptr(op.inputs[1])}, "
                f"nullptr, {e.ptr(out.id, const=False)}, {op.attr('eps')!r}f, r0, r1, smem);")


SPEC = RmsNorm()
