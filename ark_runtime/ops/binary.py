"""Binary elementwise ops with NumPy broadcasting: y = f(a, b) (elementwise.cuh's binary_tile; numeric.cuh's
`binary<F>`). FNS names each function's float64 reference and its code in numeric.cuh."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import ModelError, Op, Tensor, broadcast
from ark_runtime.ops.blocks import elementwise_tiles
from ark_runtime.ops.spec import Built, OpSpec, arity, no_attrs, same_dtype

FNS = {"add": (np.add, "ADD"), "sub": (np.subtract, "SUB"), "mul": (np.multiply, "MUL"), "div": (np.divide, "DIV"),
       "max": (np.maximum, "MAX")}


class Binary(OpSpec):
    kind = "binary"
    elementwise = True

    def fns(self) -> tuple[str, ...]:
        return tuple(FNS)

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        if fn not in FNS:
            raise ModelError(f"binary op {fn!r} is not one of {', '.join(FNS)}")
        arity(fn, inputs, 2)
        no_attrs(fn, attrs)
        a, b = inputs
        shape = broadcast(a.shape, b.shape)
        if shape is None:
            raise ModelError(f"{fn}: shapes {a.shape} and {b.shape} do not broadcast")
        same_dtype(fn, a, b)
        if a.dtype == "int32":
            raise ModelError(f"{fn}: {a.name} is int32; the op takes fp32, fp16, bf16")
        return Built(shape, a.dtype)

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        return FNS[op.fn][0](args[0], args[1])

    def variant(self, model, op: Op, device) -> dict:
        return {"template": "binary_tile"}

    def tiles(self, tm, op: Op, v: dict) -> None:
        elementwise_tiles(tm)

    def emit(self, e, op: Op, v: dict) -> str:
        out = e.tensor(op.output)
        maps = [e.broadcast_map(f"Op{op.id}In{j}", e.tensor(i), out) or "ark::Same" for j, i in enumerate(op.inputs)]
        x = [e.ptr(i) for i in op.inputs]
        return (f"ark::binary_tile<ark::{FNS[op.fn][1]}, {e.ctype(out)}, {maps[0]}, {maps[1]}>({x[0]}, {x[1]}, "
                f"{e.ptr(out.id, const=False)}, {out.cols}, r0, r1, c0, c1);")


SPEC = Binary()
