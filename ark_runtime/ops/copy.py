"""A tensor copied to pinned host memory or another GPU buffer from inside the running kernel (copy.cuh): by the
CTAs' own stores (variant path "sm": cut into tiles over the SMs), or as one tile that posts a DMA to an engine's
queue ("engine") or launches a device graph on a copy engine ("graph"). The path is chosen outside the op (the
runtime, by size and what the machine has: LowerOptions.copy_paths)."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import PLACEMENTS, ModelError, Op, Tensor
from ark_runtime.ops.blocks import elementwise_blocks
from ark_runtime.ops.spec import Built, OpSpec, arity, no_attrs
from ark_runtime.tiling import Region

PATHS = ("sm", "engine", "graph")


class Copy(OpSpec):
    kind = "copy"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("copy", inputs, 1)
        no_attrs("copy", attrs, ("placement",))
        placement = attrs.get("placement", "host")
        if placement not in PLACEMENTS:
            raise ModelError(f"copy: placement {placement!r} is not one of {', '.join(PLACEMENTS)}")
        return Built(inputs[0].shape, inputs[0].dtype, placement=placement)

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        return np.array(args[0], copy=True)

    def variant(self, model, op: Op, device) -> dict:
        return {"template": "copy_tile", "path": "engine"}

    def tiles(self, tm, op: Op, v: dict) -> None:
        src, out = tm.ins[0], tm.out
        if v["path"] == "sm":  # each tile a contiguous byte range, so the SMs copy in parallel
            for r0, r1, c0, c1 in elementwise_blocks(out, tm.num_sms):
                tm.add(r0, r1, c0, c1, [Region(src.id, r0, r1, c0, c1)], 2 * (r1 - r0) * (c1 - c0) * tm.esize, 0)
        else:
            tm.add(0, out.rows, 0, out.cols, [Region.whole(src)], 2 * out.nbytes, 0, dma=True)

    def emit(self, e, op: Op, v: dict) -> str:
        out = e.tensor(op.output)
        n = e.esize(out)
        return (f"{{ const long long off = ((long long)r0 * {out.cols} + c0) * {n}, n = (long long)(r1 - r0) * (c1 - c0) "
                f"* {n};\n      return ark::copy_tile(p, q, tile, op, (const char*)T[{op.inputs[0]}] + off, "
                f"(char*)T[{out.id}] + off, n); }}")


SPEC = Copy()
