"""Unary elementwise ops: y = f(x) for each element (elementwise.cuh's unary_tile; numeric.cuh's `unary<F>`). The
table FNS names each function's float64 reference and its code in numeric.cuh; fused chains (fused.py) and matmul
epilogues take the same functions."""

from __future__ import annotations

import math

import numpy as np

from ark_runtime.graph import ModelError, Op, Tensor
from ark_runtime.ops.blocks import elementwise_tiles
from ark_runtime.ops.spec import Built, OpSpec, arity, no_attrs, require_float

_erf = np.vectorize(math.erf, otypes=[np.float64])

# name -> (float64 reference, numeric.cuh's Fn)
FNS = {
    "gelu": (lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), "GELU"),
    "silu": (lambda x: x / (1 + np.exp(-x)), "SILU"),
    "relu": (lambda x: np.maximum(x, 0), "RELU"),
    "exp": (np.exp, "EXP"),
    "neg": (np.negative, "NEG"),
    "sqrt": (np.sqrt, "SQRT"),
    "rsqrt": (lambda x: 1 / np.sqrt(x), "RSQRT"),
    "identity": (lambda x: x, "IDENTITY"),
    "tanh": (np.tanh, "TANH"),
    "gelu_erf": (lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), "GELU_ERF"),  # PyTorch's and BERT's GELU
}


class Unary(OpSpec):
    kind = "unary"
    elementwise = True

    def fns(self) -> tuple[str, ...]:
        return tuple(FNS)

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        if fn not in FNS:
            raise ModelError(f"unary op {fn!r} is not one of {', '.join(FNS)}")
        arity(fn, inputs, 1)
        no_attrs(fn, attrs)
        require_float(fn, inputs[0])
        return Built(inputs[0].shape, inputs[0].dtype)

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        return FNS[op.fn][0](args[0])

    def variant(self, model, op: Op, device) -> dict:
        return {"template": "unary_tile"}

    def tiles(self, tm, op: Op, v: dict) -> None:
        elementwise_tiles(tm)

    def emit(self, e, op: Op, v: dict) -> str:
        out = e.tensor(op.output)
        return (f"ark::unary_tile<ark::{FNS[op.fn][1]}, {e.ctype(out)}, ark::Same>({e.ptr(op.inputs[0])}, "
                f"{e.ptr(out.id, const=False)}, {out.cols}, r0, r1, c0, c1);")


SPEC = Unary()
