"""LayerNorm over the last axis, scaled by its weight and shifted by its bias (rows.cuh's norm_rows)."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import Op, Tensor
from ark_runtime.ops.blocks import RowSpec
from ark_runtime.ops.spec import Built, arity, eps_value, no_attrs, norm_params


class LayerNorm(RowSpec):
    kind = "layernorm"
    template = "norm_rows"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("layernorm", inputs, 3)
        no_attrs("layernorm", attrs, ("eps",))
        norm_params("layernorm", *inputs)
        return Built(inputs[0].shape, inputs[0].dtype, {"eps": eps_value(attrs.get("eps", 1e-5))})

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        x, w, b = args
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + op.attr("eps")) * w + b

    def row_call(self, e, op: Op, v: dict, x, out) -> str:
        w, b = (e.ptr(i) for i in op.inputs[1:])
        return (f"ark::norm_rows<{e.ctype(out)}, true, {x.cols}, {v['team']}>({e.ptr(x.id)}, {w}, {b}, "
                f"{e.ptr(out.id, const=False)}, {op.attr('eps')!r}f, r0, r1, smem);")


SPEC = LayerNorm()
