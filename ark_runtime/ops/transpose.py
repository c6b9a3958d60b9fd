"""The last two axes swapped, [..., A, B] -> [..., B, A], as a new tensor (transpose.cuh's transpose_tile): what a
tied embedding's logits need (h @ table^T). A tile is a block of the output, read from x through shared memory in
32 x 32 blocks so that both the reads and the writes run along rows; small matrices go several to a tile. Any
dtype: the values are moved, not converted."""

from __future__ import annotations

import math

import numpy as np

from ark_runtime.graph import ModelError, Op, Tensor
from ark_runtime.ops.blocks import MIN_TILE_ELEMENTS
from ark_runtime.ops.spec import Built, OpSpec, arity, no_attrs
from ark_runtime.tiling import Region, count

MAX_EDGE = 1024  # the largest square block a tile writes
SMEM = 32 * 33 * 4  # transpose.cuh's TRANSPOSE_SMEM: one 32 x 32 block padded a column, of up to 4-byte elements


class Transpose(OpSpec):
    kind = "transpose"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("transpose", inputs, 1)
        no_attrs("transpose", attrs)
        x = inputs[0]
        if len(x.shape) < 2:
            raise ModelError(f"transpose: {x.name} must have two axes at least ([..., A, B]), not {x.shape}")
        return Built(x.shape[:-2] + (x.shape[-1], x.shape[-2]), x.dtype)

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        return np.ascontiguousarray(np.swapaxes(args[0], -1, -2))

    def variant(self, model, op: Op, device) -> dict:
        """Tiles of about equal size that fill the SMs: whole matrices, `matrices` to a tile, where one is smaller
        than that (and than a block of MAX_EDGE x MAX_EDGE); else square blocks of the output, `edge` a power of two
        from 32 to MAX_EDGE."""
        x = model.tensors[op.inputs[0]]
        a, b = x.shape[-2:]
        per_tile = max(MIN_TILE_ELEMENTS, math.ceil(x.elements / device.num_sms))
        if a * b <= min(per_tile, MAX_EDGE * MAX_EDGE):
            return {"template": "transpose_tile", "matrices": per_tile // (a * b)}
        edge = 32
        while edge * edge < per_tile and edge < MAX_EDGE:
            edge *= 2
        return {"template": "transpose_tile", "edge": edge}

    def tiles(self, tm, op: Op, v: dict) -> None:
        x = tm.ins[0]
        a, b = x.shape[-2:]
        n = x.rows // a  # matrices
        if "matrices" in v:
            k = v["matrices"]
            for m0 in range(0, n, k):
                m1 = min(m0 + k, n)
                tm.add(m0 * b, m1 * b, 0, a, [Region(x.id, m0 * a, m1 * a, 0, b)], 2 * (m1 - m0) * a * b * tm.esize, 0)
            return
        edge = v["edge"]
        count(n * -(-b // edge) * -(-a // edge))
        for m in range(n):
            for j0 in range(0, b, edge):  # rows of the output block: columns of x
                j1 = min(j0 + edge, b)
                for i0 in range(0, a, edge):  # columns of the output block: rows of x
                    i1 = min(i0 + edge, a)
                    tm.add(m * b + j0, m * b + j1, i0, i1, [Region(x.id, m * a + i0, m * a + i1, j0, j1)],
                           2 * (j1 - j0) * (i1 - i0) * tm.esize, 0)

    def emit(self, e, op: Op, v: dict) -> str:
        x, out = e.tensor(op.inputs[0]), e.tensor(op.output)
        e.need_smem(SMEM, f"static_assert(ark::TRANSPOSE_SMEM <= {SMEM}, \"ark_runtime/ops/transpose.py's SMEM\");")
        return (f"ark::transpose_tile<{e.ctype(out)}>({e.ptr(x.id)}, {e.ptr(out.id, const=False)}, {x.shape[-2]}, "
                f"{x.shape[-1]}, r0, r1, c0, c1, smem);")


SPEC = Transpose()
