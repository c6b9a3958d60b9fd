"""The index of the largest element over the last axis, as int32 [..., 1] (argmax.cuh's argmax_rows): NumPy's and
PyTorch's argmax. Ties go to the lowest index, -0 and +0 are equal, and NaN counts as larger than everything, so a
row holding NaN gives its first NaN's index (as np.argmax does). Values are compared exactly as stored, through
their bits (subnormals too, though the kernels flush them in arithmetic). Row-wise: a team of threads per row, row
blocks as tiles (blocks.py)."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import Op, Tensor
from ark_runtime.ops.blocks import row_block_rows, row_blocks, row_smem, row_team
from ark_runtime.ops.spec import Built, OpSpec, arity, esize, no_attrs, require_float
from ark_runtime.tiling import Region


class Argmax(OpSpec):
    kind = "argmax"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("argmax", inputs, 1)
        no_attrs("argmax", attrs)
        x = inputs[0]
        require_float("argmax", x)
        return Built(x.shape[:-1] + (1,), "int32")

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        return np.argmax(args[0], axis=-1, keepdims=True).astype(np.float64)

    def variant(self, model, op: Op, device) -> dict:
        x, out = model.tensors[op.inputs[0]], model.tensors[op.output]
        return {"template": "argmax_rows", "rows_per_tile": row_block_rows(out.rows, x.cols, device.num_sms),
                "team": row_team(x.dtype, out.rows, x.cols, device.num_sms)}

    def tiles(self, tm, op: Op, v: dict) -> None:
        x, out = tm.ins[0], tm.out
        for r0, r1, _, _ in row_blocks(out, tm.num_sms, x.cols):
            tm.add(r0, r1, 0, 1, [Region(x.id, r0, r1, 0, x.cols)], (r1 - r0) * (x.cols * esize(x) + tm.esize),
                   (r1 - r0) * x.cols)

    def emit(self, e, op: Op, v: dict) -> str:
        x, out = e.tensor(op.inputs[0]), e.tensor(op.output)
        row_smem(e)
        return (f"ark::argmax_rows<{e.ctype(x)}, {v['team']}>({e.ptr(x.id)}, {e.ptr(out.id, const=False)}, {x.cols}, "
                "r0, r1, smem);")


SPEC = Argmax()
