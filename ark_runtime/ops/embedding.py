"""Rows of a table [V, D] picked by int32 ids [...] -> [..., D] (embedding.cuh's embedding_rows). An id outside [0, V)
faults the kernel (BAD_INDEX, naming the row); the reference raises BadIndex for the same ids."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import ModelError, Op, Tensor
from ark_runtime.ops.blocks import row_blocks
from ark_runtime.ops.spec import BadIndex, Built, OpSpec, arity, no_attrs, require_float
from ark_runtime.tiling import Region


class Embedding(OpSpec):
    kind = "embedding"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("embedding", inputs, 2)
        no_attrs("embedding", attrs)
        table, ids = inputs
        if ids.dtype != "int32":
            raise ModelError(f"embedding: ids must be int32, not {ids.dtype}")
        if len(table.shape) != 2:
            raise ModelError(f"embedding: the table must be 2-D [V, D], not {table.shape}")
        require_float("embedding", table)
        return Built(ids.shape + (table.shape[1],), table.dtype, {"vocab": table.shape[0]})

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        table, ids = args
        flat = np.asarray(ids, np.float64).reshape(-1)
        unknown = np.isnan(flat)  # a plan's reference run: not yet written (reference.run_plan)
        bad = np.flatnonzero(~unknown & ((flat < 0) | (flat >= table.shape[0]) | (flat != np.floor(flat))))
        if bad.size:
            raise BadIndex(f"embedding (op {op.id}): row {int(bad[0])} holds id {flat[bad[0]]:g}, outside the "
                           f"table's {table.shape[0]} rows")
        out = table[np.where(unknown, 0, flat).astype(np.int64)]
        out[unknown] = np.nan
        return out.reshape(np.shape(ids) + (table.shape[1],))

    def variant(self, model, op: Op, device) -> dict:
        return {"template": "embedding_rows"}

    def tiles(self, tm, op: Op, v: dict) -> None:
        table, ids = tm.ins
        for r0, r1, _, _ in row_blocks(tm.out, tm.num_sms):
            tm.add(r0, r1, 0, tm.out.cols, [Region.whole(table), Region.whole(ids)],
                   2 * (r1 - r0) * tm.out.cols * tm.esize, 0)

    def emit(self, e, op: Op, v: dict) -> str:
        out = e.tensor(op.output)
        table, ids = op.inputs
        return (f"{{ const int bad = ark::embedding_rows<{e.ctype(out)}>({e.ptr(table)}, (const int*)T[{ids}], "
                f"{e.ptr(out.id, const=False)}, {op.attr('vocab')}, {out.cols}, r0, r1);\n"
                "      if (bad) return ((unsigned long long)ark::FAULT_BAD_INDEX << 32) | (unsigned)bad; }")


SPEC = Embedding()
