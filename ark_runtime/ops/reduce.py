"""Reductions over the last axis, kept as an axis of 1 (rows.cuh's reduce_rows): sum, max, mean."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import ModelError, Op, Tensor
from ark_runtime.ops.blocks import RowSpec
from ark_runtime.ops.spec import Built, arity, no_attrs, require_float

FNS = {"sum": (np.sum, "R_SUM"), "max": (np.max, "R_MAX"), "mean": (np.mean, "R_MEAN")}


class Reduce(RowSpec):
    kind = "reduce"
    template = "reduce_rows"

    def fns(self) -> tuple[str, ...]:
        return tuple(FNS)

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        if fn not in FNS:
            raise ModelError(f"reduction {fn!r} is not one of {', '.join(FNS)}")
        arity(f"reduce_{fn}", inputs, 1)
        no_attrs(f"reduce_{fn}", attrs)
        require_float(f"reduce_{fn}", inputs[0])
        return Built(inputs[0].shape[:-1] + (1,), inputs[0].dtype)

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        return FNS[op.fn][0](args[0], axis=-1, keepdims=True)

    def row_call(self, e, op: Op, v: dict, x, out) -> str:
        return (f"ark::reduce_rows<ark::{FNS[op.fn][1]}, {e.ctype(out)}, {x.cols}, {v['team']}>({e.ptr(x.id)}, "
                f"{e.ptr(out.id, const=False)}, r0, r1, smem);")


SPEC = Reduce()
