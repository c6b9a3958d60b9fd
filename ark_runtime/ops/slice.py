"""Columns [start, stop) of x's last axis as a new tensor, [..., stop - start] (slice.cuh's slice_tile), in any
dtype: the values are moved, not converted. Tiles as an elementwise op's, each reading the columns it copies."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import ModelError, Op, Tensor
from ark_runtime.ops.blocks import elementwise_blocks
from ark_runtime.ops.spec import Built, OpSpec, arity, no_attrs
from ark_runtime.tiling import Region


def _index(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class Slice(OpSpec):
    kind = "slice"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("slice", inputs, 1)
        no_attrs("slice", attrs, ("start", "stop"))
        x = inputs[0]
        start, stop = attrs.get("start"), attrs.get("stop")
        if not (_index(start) and _index(stop) and 0 <= start < stop <= x.cols):
            raise ModelError(f"slice: start and stop must be ints with 0 <= start < stop <= {x.cols} (the last axis of "
                             f"{x.name} {x.shape}), not {start!r} and {stop!r}")
        return Built(x.shape[:-1] + (stop - start,), x.dtype, {"start": start, "stop": stop})

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        return np.array(args[0][..., op.attr("start"):op.attr("stop")])

    def variant(self, model, op: Op, device) -> dict:
        return {"template": "slice_tile"}

    def tiles(self, tm, op: Op, v: dict) -> None:
        x, start = tm.ins[0], op.attr("start")
        for r0, r1, c0, c1 in elementwise_blocks(tm.out, tm.num_sms):
            tm.add(r0, r1, c0, c1, [Region(x.id, r0, r1, start + c0, start + c1)], 2 * (r1 - r0) * (c1 - c0) * tm.esize,
                   0)

    def emit(self, e, op: Op, v: dict) -> str:
        x, out = e.tensor(op.inputs[0]), e.tensor(op.output)
        return (f"ark::slice_tile<{e.ctype(out)}>({e.ptr(x.id)}, {e.ptr(out.id, const=False)}, {x.cols}, {out.cols}, "
                f"{op.attr('start')}, r0, r1, c0, c1);")


SPEC = Slice()
