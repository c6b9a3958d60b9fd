"""An int32 state raised in place by a constant each time the op runs, every element of it (a decode step's
position, or one position per sequence of a batch): the output is the state as raised (its memory is the state's)."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import ModelError, Op, Tensor
from ark_runtime.ops.spec import Built, OpSpec, arity, no_attrs
from ark_runtime.tiling import Region


class Count(OpSpec):
    kind = "count"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("count", inputs, 1)
        no_attrs("count", attrs, ("by",))
        state = inputs[0]
        if state.dtype != "int32":
            raise ModelError(f"count: {state.name} must be an int32 state (a position per element), not "
                             f"{state.dtype} {state.shape}")
        by = attrs.get("by", 1)
        if isinstance(by, bool) or not isinstance(by, int) or not -(1 << 31) < by < 1 << 31:
            raise ModelError(f"count: by={by!r} must be an int that fits int32")
        return Built(state.shape, state.dtype, {"by": by}, placement=state.placement, writes_in_place=0)

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        return np.asarray(args[0], np.float64) + op.attr("by")

    def variant(self, model, op: Op, device) -> dict:
        return {"template": "count"}

    def tiles(self, tm, op: Op, v: dict) -> None:
        state = tm.ins[0]
        tm.add(0, state.rows, 0, state.cols, [Region.whole(state)], 8 * state.elements, state.elements)

    def emit(self, e, op: Op, v: dict) -> str:
        state = e.tensor(op.output)
        fence = " __threadfence_system();" if state.placement == "host" else ""
        if state.elements == 1:
            return (f"if (threadIdx.x == 0) {{ *(volatile int*)T[{op.output}] += {op.attr('by')};{fence} }}\n"
                    "      __syncthreads();")
        return (f"for (int i = threadIdx.x; i < {state.elements}; i += blockDim.x) "
                f"((volatile int*)T[{op.output}])[i] += {op.attr('by')};\n"
                f"      {fence.strip() + ' ' if fence else ''}__syncthreads();")


SPEC = Count()
