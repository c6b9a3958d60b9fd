"""The sum of a split-K matmul's parts (split_k.py): out = parts[0] + ... + parts[S-1], each part M x N of fp32 sums
in rows s * M .. of its input, then the matmul's epilogue if it had one (elementwise.cuh's split_sum_tile)."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import Op
from ark_runtime.ops import fused
from ark_runtime.ops.blocks import elementwise_blocks, read_like
from ark_runtime.ops.spec import OpSpec
from ark_runtime.tiling import Region


class SplitSum(OpSpec):
    kind = "split_sum"
    written_by_passes = True

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        parts = op.attr("k_splits")
        return fused.apply_epilogue(op.attr("epilogue"), args[0].reshape(parts, -1, args[0].shape[-1]).sum(axis=0),
                                    args[1:])

    def variant(self, model, op: Op, device) -> dict:
        return {"template": "split_sum_tile", "parts": op.attr("k_splits")}

    def tiles(self, tm, op: Op, v: dict) -> None:
        part, out, parts = tm.ins[0], tm.out, v["parts"]
        for r0, r1, c0, c1 in elementwise_blocks(out, tm.num_sms):
            cells = (r1 - r0) * (c1 - c0)
            reads = [Region(part.id, s * out.rows + r0, s * out.rows + r1, c0, c1) for s in range(parts)]
            reads += [read_like(t, out, r0, r1, c0, c1) for t in tm.ins[1:]]  # the epilogue's inputs (fusion.py)
            tm.add(r0, r1, c0, c1, reads, cells * (4 * parts + tm.esize * len(tm.ins)), cells * parts)

    def emit(self, e, op: Op, v: dict) -> str:
        out = e.tensor(op.output)
        epi = e.epilogue(op, out, [e.tensor(i) for i in op.inputs[1:]])
        return (f"ark::split_sum_tile<{v['parts']}, {e.ctype(out)}>({e.ptr(op.inputs[0])}, {e.ptr(out.id, const=False)}, "
                f"{out.rows * out.cols}ll, {out.cols}, r0, r1, c0, c1{epi});")


SPEC = SplitSum()
