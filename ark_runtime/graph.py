"""The records of a model's graph: tensors, ops and the rules every tensor obeys (dtypes, placements, extents).
The model API (model.py) builds them; every pass and op spec reads them."""

from __future__ import annotations

import math
from dataclasses import dataclass

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int32": 4}
FLOAT_DTYPES = ("fp32", "fp16", "bf16")
PLACEMENTS = ("device", "host")
MAX_EXTENT = 1 << 31  # rows and columns of a tensor's 2-D view are below this: the kernels' 32-bit indices
MAX_WORLD = 64  # GPUs one program spans: a counter's signal names the ranks it reaches in one 64-bit mask


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
    alias: int | None = None  # the state tensor this op output writes in place (its memory); None: memory of its own

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
        out = {"id": self.id, "name": self.name, "shape": list(self.shape), "dtype": self.dtype,
               "placement": self.placement, "producer": self.producer}
        if self.alias is not None:
            out["alias"] = self.alias
        return out

    @property
    def root(self) -> int:
        """The tensor whose memory this one is: its state's, or its own."""
        return self.id if self.alias is None else self.alias


@dataclass(frozen=True)
class Op:
    id: int
    kind: str  # the op spec that runs it (ark_runtime/ops/): unary, binary, matmul, attention, ...
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
