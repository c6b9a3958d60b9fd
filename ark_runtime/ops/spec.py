"""What an op kind is to the runtime, in one place: `OpSpec`. Each kind's module (ark_runtime/ops/<kind>.py)
subclasses it once and registers the instance; every pass dispatches through the registry (ops/__init__.py).

A spec answers five questions about its ops:
  build      the shape check: the output's shape, dtype and attributes, or ModelError naming what to change
  reference  the op on whole float64 NumPy arrays: what the kernel must compute
  variant    the kernel choice (template, block, stages, ...) as JSON-able data, made once and kept in the plan
  tiles      the op cut into tiles: the region each writes, the regions it reads, its bytes and flops
  emit       the `case` body of the generated kernel that runs one tile, calling the op's CUDA template
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from ark_runtime.graph import DTYPE_BYTES, FLOAT_DTYPES, ModelError, Op, Tensor

if TYPE_CHECKING:
    import numpy as np

    from ark_runtime.kernel.codegen import Emitter
    from ark_runtime.model import Model
    from ark_runtime.scheduler import DeviceSpec
    from ark_runtime.tiling import TileMaker


class BadIndex(ValueError):
    """An index outside its table (an embedding id): the float64 reference raises it where the kernel faults."""


@dataclass(frozen=True)
class Built:
    """What `OpSpec.build` makes of a call: the output's shape and dtype, and the op's attributes."""

    shape: tuple[int, ...]
    dtype: str
    attrs: dict = field(default_factory=dict)
    placement: str = "device"
    writes_in_place: int | None = None  # the input (its place among the op's inputs) whose state the output overwrites


class OpSpec:
    kind: ClassVar[str] = ""
    elementwise: ClassVar[bool] = False  # may join an elementwise chain (fusion.py): one output element per input's
    chain_head: ClassVar[bool] = False  # an elementwise chain after it fuses into its stores (an epilogue)
    written_by_passes: ClassVar[bool] = False  # made by a pass (fusion, split-K), not by the model API
    # communicates with other ranks (send, recv, collectives): only a World (ark_runtime/world.py) of every rank's
    # model evaluates and lowers it, as the ops each rank runs (a copy into a peer's memory, reduce_peers, ...)
    needs_world: ClassVar[bool] = False

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        raise ModelError(f"{self.kind} ops are made by the lowering passes, not by the model API")

    def fns(self) -> tuple[str, ...]:
        """The functions within the kind (unary: gelu, silu, ...); the kind alone where it has none."""
        return (self.kind,)

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def variant(self, model: Model, op: Op, device: DeviceSpec) -> dict:
        return {"template": self.kind}

    def knobs(self, model: Model, op: Op, device: DeviceSpec) -> dict[str, tuple]:
        """The choices of `variant` a tuner may set for this op, each with the values it may take (none: {})."""
        return {}

    def tuned(self, model: Model, op: Op, device: DeviceSpec, knobs: dict) -> dict:
        """The variant with `knobs` (some of `knobs()`'s, each one of its values) set rather than chosen."""
        if knobs:
            raise ModelError(f"{self.kind} (op {op.id}) has no knobs to set, not {', '.join(knobs)}")
        return self.variant(model, op, device)

    def tiles(self, tm: TileMaker, op: Op, v: dict) -> None:
        raise NotImplementedError

    def emit(self, e: Emitter, op: Op, v: dict) -> str:
        raise NotImplementedError

    def bad_index(self, op: Op, detail: int) -> str:
        """What a BAD_INDEX fault of one of this op's tiles means (`detail`: what its template returned)."""
        return f"row {detail - 1} holds an id outside the table"

    def describe(self, op: Op) -> str:
        """A few words for tables (profile, plan): kind and function."""
        what = op.kind if op.fn in (None, op.kind) else f"{op.kind} {op.fn}"
        epilogue = op.attr("epilogue")
        return f"{what} +{'+'.join(step[0] for step in epilogue)}" if epilogue else what


# --- the checks the specs' build() share --------------------------------------------------------------------
def require_float(op: str, t: Tensor) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise ModelError(f"{op}: {t.name} is {t.dtype}; the op takes {', '.join(FLOAT_DTYPES)}")


def same_dtype(op: str, a: Tensor, b: Tensor) -> None:
    if a.dtype != b.dtype:
        raise ModelError(f"{op}: {a.name} is {a.dtype} but {b.name} is {b.dtype}; cast one first")


def norm_params(op: str, x: Tensor, *params: Tensor) -> None:
    require_float(op, x)
    for p in params:
        if p.shape != (x.shape[-1],):
            raise ModelError(f"{op}: {p.name} must be ({x.shape[-1]},) for x {x.shape}, not {p.shape}")
        same_dtype(op, x, p)


def eps_value(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise ModelError(f"eps must be a number in (0, 1), not {eps!r}")
    return float(eps)


def arity(op: str, inputs: tuple[Tensor, ...], n: int) -> None:
    if len(inputs) != n:
        raise ModelError(f"{op} takes {n} tensor(s), not {len(inputs)}")


def no_attrs(op: str, attrs: dict, allowed: tuple[str, ...] = ()) -> None:
    extra = sorted(set(attrs) - set(allowed))
    if extra:
        raise ModelError(f"{op} takes no argument {', '.join(extra)}" + (f" (it takes {', '.join(allowed)})"
                                                                          if allowed else ""))


def esize(t: Tensor) -> int:
    return DTYPE_BYTES[t.dtype]
