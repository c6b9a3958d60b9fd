"""The model API: tensors and the ops between them, built as a graph with shapes checked as each op is added.

    m = Model("mlp")
    x = m.input("x", (8, 4096), "bf16")
    w1, w2 = m.input("w1", (4096, 16384), "bf16"), m.input("w2", (16384, 4096), "bf16")
    m.output(m.matmul(m.gelu(m.matmul(x, w1)), w2))

Every op makes a new tensor (the graph is single-assignment), so the plan (ark_runtime/plan.py) can tell
who writes and who reads each byte. Shapes broadcast as in NumPy; a bad shape, dtype or argument raises
ModelError naming the op and what to change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int32": 4}
FLOAT_DTYPES = ("fp32", "fp16", "bf16")
PLACEMENTS = ("device", "host")
UNARY = ("gelu", "silu", "relu", "exp", "neg", "sqrt", "rsqrt", "identity")
BINARY = ("add", "sub", "mul", "div", "max")
REDUCTIONS = ("sum", "max", "mean")
MAX_EXTENT = 1 << 31  # rows and columns of a tensor's 2-D view are below this: the kernels' 32-bit indices


class ModelError(ValueError):
    """An op or tensor the model cannot have; the message says which and why."""


@dataclass(frozen=True)
class Tensor:
    id: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    placement: str = "device"
    producer: int | None = None  # the op that writes it; None for an input

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.elements * DTYPE_BYTES[self.dtype]

    @property
    def rows(self) -> int:
        """Rows of its 2-D view (every axis but the last folded)."""
        return math.prod(self.shape[:-1])

    @property
    def cols(self) -> int:
        return self.shape[-1]

    def as_json(self) -> dict:
        return {"id": self.id, "name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "placement": self.placement, "producer": self.producer}


@dataclass(frozen=True)
class Op:
    id: int
    kind: str  # unary, binary, reduce, softmax, layernorm, rmsnorm, matmul, attention, rope, embedding, copy
    fn: str  # the function within the kind (gelu, add, sum, ...), else the kind again
    inputs: tuple[int, ...]
    output: int
    attrs: tuple[tuple[str, object], ...] = ()

    def attr(self, name: str, default=None):
        return dict(self.attrs).get(name, default)

    def as_json(self) -> dict:
        return {"id": self.id, "kind": self.kind, "fn": self.fn, "inputs": list(self.inputs), "output": self.output,
                "attrs": dict(self.attrs)}


def broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """NumPy's broadcast of two shapes, or None when they do not broadcast."""
    out = []
    for x, y in zip(reversed((1,) * (len(b) - len(a)) + a), reversed((1,) * (len(a) - len(b)) + b)):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(reversed(out))


@dataclass
class Model:
    name: str = "model"
    tensors: list[Tensor] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)

    # --- tensors ----------------------------------------------------------------------------------
    def input(self, name: str, shape, dtype: str = "fp32", placement: str = "device") -> Tensor:
        if not isinstance(name, str) or not name.isidentifier():
            raise ModelError(f"tensor name {name!r} must be an identifier")
        if any(t.name == name for t in self.tensors):
            raise ModelError(f"tensor name {name!r} is already taken")
        return self._tensor(name, shape, dtype, placement, None)

    def _tensor(self, name, shape, dtype, placement, producer) -> Tensor:
        try:
            shape = tuple(shape)
        except TypeError:
            raise ModelError(f"tensor {name}: shape {shape!r} must be a sequence of positive ints") from None
        if not shape or any(isinstance(s, bool) or not isinstance(s, int) or s <= 0 for s in shape):
            raise ModelError(f"tensor {name}: shape {shape!r} must be one or more positive ints")
        t = Tensor(len(self.tensors), name, shape, dtype, placement, producer)
        if t.rows >= MAX_EXTENT or t.cols >= MAX_EXTENT:
            raise ModelError(f"tensor {name}: shape {shape} folds to {t.rows:,} rows (every axis but the last) by "
                             f"{t.cols:,} columns; the kernels index each with 32-bit ints, so both must be below "
                             "2**31: reshape it")
        if dtype not in DTYPE_BYTES:
            raise ModelError(f"tensor {name}: dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
        if placement not in PLACEMENTS:
            raise ModelError(f"tensor {name}: placement {placement!r} is not one of {', '.join(PLACEMENTS)}")
        self.tensors.append(t)
        return t

    def _own(self, op: str, *ts: Tensor) -> None:
        for t in ts:
            if not isinstance(t, Tensor) or t.id >= len(self.tensors) or self.tensors[t.id] is not t:
                raise ModelError(f"{op}: {t!r} is not a tensor of model {self.name!r}")

    def _op(self, kind: str, fn: str, inputs: tuple[Tensor, ...], shape, dtype: str, placement: str = "device",
            **attrs) -> Tensor:
        out = self._tensor(f"{fn}{len(self.ops)}", shape, dtype, placement, len(self.ops))
        self.ops.append(Op(len(self.ops), kind, fn, tuple(t.id for t in inputs), out.id, tuple(sorted(attrs.items()))))
        return out

    def output(self, *ts: Tensor) -> None:
        self._own("output", *ts)
        self.outputs.extend(t.id for t in ts if t.id not in self.outputs)

    # --- elementwise ------------------------------------------------------------------------------
    def unary(self, fn: str, x: Tensor) -> Tensor:
        self._own(fn, x)
        if fn not in UNARY:
            raise ModelError(f"unary op {fn!r} is not one of {', '.join(UNARY)}")
        self._float(fn, x)
        return self._op("unary", fn, (x,), x.shape, x.dtype)

    def gelu(self, x: Tensor) -> Tensor:
        return self.unary("gelu", x)

    def silu(self, x: Tensor) -> Tensor:
        return self.unary("silu", x)

    def binary(self, fn: str, a: Tensor, b: Tensor) -> Tensor:
        self._own(fn, a, b)
        if fn not in BINARY:
            raise ModelError(f"binary op {fn!r} is not one of {', '.join(BINARY)}")
        shape = broadcast(a.shape, b.shape)
        if shape is None:
            raise ModelError(f"{fn}: shapes {a.shape} and {b.shape} do not broadcast")
        self._same_dtype(fn, a, b)
        return self._op("binary", fn, (a, b), shape, a.dtype)

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        return self.binary("add", a, b)

    def mul(self, a: Tensor, b: Tensor) -> Tensor:
        return self.binary("mul", a, b)

    # --- along the last axis ----------------------------------------------------------------------
    def reduce(self, fn: str, x: Tensor) -> Tensor:
        """Over the last axis, kept as an axis of 1."""
        self._own(f"reduce_{fn}", x)
        if fn not in REDUCTIONS:
            raise ModelError(f"reduction {fn!r} is not one of {', '.join(REDUCTIONS)}")
        self._float(f"reduce_{fn}", x)
        return self._op("reduce", fn, (x,), x.shape[:-1] + (1,), x.dtype)

    def softmax(self, x: Tensor) -> Tensor:
        self._own("softmax", x)
        self._float("softmax", x)
        return self._op("softmax", "softmax", (x,), x.shape, x.dtype)

    def layernorm(self, x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
        self._own("layernorm", x, weight, bias)
        self._norm_params("layernorm", x, weight, bias)
        return self._op("layernorm", "layernorm", (x, weight, bias), x.shape, x.dtype, eps=self._eps(eps))

    def rmsnorm(self, x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
        self._own("rmsnorm", x, weight)
        self._norm_params("rmsnorm", x, weight)
        return self._op("rmsnorm", "rmsnorm", (x, weight), x.shape, x.dtype, eps=self._eps(eps))

    # --- matmul and attention -------------------------------------------------------------------------
    def matmul(self, a: Tensor, b: Tensor) -> Tensor:
        """a [..., M, K] @ b [K, N] -> [..., M, N], fp32 accumulation."""
        self._own("matmul", a, b)
        self._float("matmul", a)
        self._same_dtype("matmul", a, b)
        if len(b.shape) != 2:
            raise ModelError(f"matmul: the right operand must be 2-D [K, N], not {b.shape}")
        if a.shape[-1] != b.shape[0]:
            raise ModelError(f"matmul: inner dimensions differ: {a.shape} @ {b.shape} "
                             f"(K {a.shape[-1]} vs {b.shape[0]})")
        return self._op("matmul", "matmul", (a, b), a.shape[:-1] + (b.shape[1],), a.dtype)

    def attention(self, q: Tensor, k: Tensor, v: Tensor, heads: int, causal: bool = True) -> Tensor:
        """softmax(q k^T / sqrt(D)) v per head (prefill, flash-style), causal by default. q, k, v are
        [..., S, heads * D] as the projections make them; the result has the same shape."""
        self._own("attention", q, k, v)
        self._float("attention", q)
        self._same_dtype("attention", q, k)
        self._same_dtype("attention", q, v)
        if len(q.shape) < 2 or q.shape != k.shape or q.shape != v.shape:
            raise ModelError(f"attention: q, k, v must share one [..., S, E] shape, not {q.shape}, {k.shape}, "
                             f"{v.shape}")
        if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1 or q.shape[-1] % heads:
            raise ModelError(f"attention: heads={heads!r} must be a positive int dividing E={q.shape[-1]}")
        return self._op("attention", "attention", (q, k, v), q.shape, q.dtype, heads=heads, causal=bool(causal))

    def rope(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """Rotary embedding of x [..., S, D] with cos/sin [S, D/2]."""
        self._own("rope", x, cos, sin)
        self._float("rope", x)
        if len(x.shape) < 2 or x.shape[-1] % 2:
            raise ModelError(f"rope: x must be [..., S, D] with D even, not {x.shape}")
        want = (x.shape[-2], x.shape[-1] // 2)
        if cos.shape != want or sin.shape != want:
            raise ModelError(f"rope: cos and sin must be {want} for x {x.shape}, not {cos.shape} and {sin.shape}")
        return self._op("rope", "rope", (x, cos, sin), x.shape, x.dtype)

    def embedding(self, table: Tensor, ids: Tensor) -> Tensor:
        """Rows of table [V, D] picked by ids [...] (int32) -> [..., D]."""
        self._own("embedding", table, ids)
        if ids.dtype != "int32":
            raise ModelError(f"embedding: ids must be int32, not {ids.dtype}")
        if len(table.shape) != 2:
            raise ModelError(f"embedding: the table must be 2-D [V, D], not {table.shape}")
        self._float("embedding", table)
        return self._op("embedding", "embedding", (table, ids), ids.shape + (table.shape[1],), table.dtype,
                        vocab=table.shape[0])

    def copy(self, x: Tensor, placement: str = "host") -> Tensor:
        """x copied to `placement` ("host": pinned host memory), by DMA from inside the running kernel."""
        self._own("copy", x)
        return self._op("copy", "copy", (x,), x.shape, x.dtype, placement=placement)

    # --- checks ---------------------------------------------------------------------------------------
    @staticmethod
    def _float(op: str, t: Tensor) -> None:
        if t.dtype not in FLOAT_DTYPES:
            raise ModelError(f"{op}: {t.name} is {t.dtype}; the op takes {', '.join(FLOAT_DTYPES)}")

    @staticmethod
    def _same_dtype(op: str, a: Tensor, b: Tensor) -> None:
        if a.dtype != b.dtype:
            raise ModelError(f"{op}: {a.name} is {a.dtype} but {b.name} is {b.dtype}; cast one first")

    def _norm_params(self, op: str, x: Tensor, *params: Tensor) -> None:
        self._float(op, x)
        for p in params:
            if p.shape != (x.shape[-1],):
                raise ModelError(f"{op}: {p.name} must be ({x.shape[-1]},) for x {x.shape}, not {p.shape}")
            self._same_dtype(op, x, p)

    @staticmethod
    def _eps(eps) -> float:
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
            raise ModelError(f"eps must be a number in (0, 1), not {eps!r}")
        return float(eps)

    def as_json(self) -> dict:
        return {"name": self.name, "tensors": [t.as_json() for t in self.tensors],
                "ops": [o.as_json() for o in self.ops], "outputs": list(self.outputs)}
