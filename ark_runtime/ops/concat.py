"""Two tensors joined along the last axis, a [..., Da] and b [..., Db] -> [..., Da + Db] (concat.cuh's concat_tile), in
any dtype: the values are moved, not converted. Tiles as an elementwise op's, each reading the columns of a and of b
that it copies."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import ModelError, Op, Tensor
from ark_runtime.ops.blocks import elementwise_blocks
from ark_runtime.ops.spec import Built, OpSpec, arity, no_attrs, same_dtype
from ark_runtime.tiling import Region


class Concat(OpSpec):
    kind = "concat"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("concat", inputs, 2)
        no_attrs("concat", attrs)
        a, b = inputs
        if a.shape[:-1] != b.shape[:-1]:
            raise ModelError(f"concat: {a.name} {a.shape} and {b.name} {b.shape} must agree on every axis but the last "
                             "(no broadcast)")
        same_dtype("concat", a, b)
        return Built(a.shape[:-1] + (a.cols + b.cols,), a.dtype)

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(args, axis=-1)

    def variant(self, model, op: Op, device) -> dict:
        return {"template": "concat_tile"}

    def tiles(self, tm, op: Op, v: dict) -> None:
        a, b = tm.ins
        for r0, r1, c0, c1 in elementwise_blocks(tm.out, tm.num_sms):
            reads = []
            if c0 < a.cols:
                reads.append(Region(a.id, r0, r1, c0, min(c1, a.cols)))
            if c1 > a.cols:
                reads.append(Region(b.id, r0, r1, max(c0, a.cols) - a.cols, c1 - a.cols))
            tm.add(r0, r1, c0, c1, reads, 2 * (r1 - r0) * (c1 - c0) * tm.esize, 0)

    def emit(self, e, op: Op, v: dict) -> str:
        a, b = (e.tensor(i) for i in op.inputs)
        out = e.tensor(op.output)
        return (f"ark::concat_tile<{e.ctype(out)}>({e.ptr(a.id)}, {e.ptr(b.id)}, {e.ptr(out.id, const=False)}, "
                f"{a.cols}, {b.cols}, r0, r1, c0, c1);")


SPEC = Concat()
