"""Reductions over the last axis, kept as an axis of 1 (rows.cuh's reduce_rows): sum, max, mean."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import ModelError, Op, Tensor
from ark_runtime.ops.blocks import row_smem, row_tiles, row_variant
from ark_runtime.ops.spec import Built, OpSpec, arity, no_attrs, require_float

FNS = {"sum": (np.sum, "R_SUM"), "max": (np.max, "R_MAX"), "mean": (np.mean, "R_MEAN")}


class Reduce(OpSpec):
    kind = "reduce"

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

    def variant(self, model, op: Op, device) -> dict:
        return row_variant("reduce_rows", op, model, device)

    def tiles(self, tm, op: Op, v: dict) -> None:
        row_tiles(tm)

    def emit(self, e, op: Op, v: dict) -> str:
        row_smem(e)
        out, x = e.tensor(op.output), e.tensor(op.inputs[0])
        return (f"ark::reduce_rows<ark::{FNS[op.fn][1]}, {e.ctype(out)}, {x.cols}, {v['team']}>({e.ptr(x.id)}, "
                f"{e.ptr(out.id, const=False)}, r0, r1, smem);")


SPEC = Reduce()
