"""x converted to another dtype, element by element (cast.cuh's cast_tile): between fp32, fp16 and bf16, and from
int32 ids to any of them. Each value is rounded once, to nearest even (an fp16 value past 65,504 becomes inf; an
int32 past 2^24 rounds in fp32 too). Not a fusion step (a chain keeps one dtype): its own tiles, as an elementwise
op's."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import FLOAT_DTYPES, ModelError, Op, Tensor
from ark_runtime.ops.blocks import elementwise_blocks
from ark_runtime.ops.spec import Built, OpSpec, arity, esize, no_attrs
from ark_runtime.tiling import Region

BF16_MAX = float.fromhex("0x1.fep127")  # the largest finite bf16


def round_to(dtype: str, x: np.ndarray) -> np.ndarray:
    """float64 values rounded to `dtype` (round to nearest, ties to even; past the largest finite value, inf), as
    float64: what a cast stores."""
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == "fp32":
            return x.astype(np.float32).astype(np.float64)
        if dtype == "fp16":
            return x.astype(np.float16).astype(np.float64)
        # bf16: 8 significant bits, fp32's exponent range; below 2^-126 a fixed step of 2^-133 (subnormals)
        _, e = np.frexp(np.where(np.isfinite(x), x, 0.0))
        step = np.ldexp(1.0, np.maximum(e - 8, -133))
        out = np.rint(x / step) * step
        out = np.where(np.abs(out) > BF16_MAX, np.copysign(np.inf, x), out)
        return np.where(np.isfinite(x), out, x)


class Cast(OpSpec):
    kind = "cast"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("cast", inputs, 1)
        no_attrs("cast", attrs, ("dtype",))
        x = inputs[0]
        dtype = attrs.get("dtype")
        if dtype not in FLOAT_DTYPES:
            raise ModelError(f"cast: dtype {dtype!r} is not one of {', '.join(FLOAT_DTYPES)} (a cast makes floats, "
                             "from floats or int32 ids)")
        if dtype == x.dtype:
            raise ModelError(f"cast: {x.name} is already {dtype}; use it as it is")
        return Built(x.shape, dtype, {"dtype": dtype})

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        return round_to(op.attr("dtype"), args[0])

    def variant(self, model, op: Op, device) -> dict:
        return {"template": "cast_tile"}

    def tiles(self, tm, op: Op, v: dict) -> None:
        x, out = tm.ins[0], tm.out
        for r0, r1, c0, c1 in elementwise_blocks(out, tm.num_sms):
            n = (r1 - r0) * (c1 - c0)
            tm.add(r0, r1, c0, c1, [Region(x.id, r0, r1, c0, c1)], n * (esize(x) + tm.esize), n)

    def emit(self, e, op: Op, v: dict) -> str:
        out, x = e.tensor(op.output), e.tensor(op.inputs[0])
        return (f"ark::cast_tile<{e.ctype(x)}, {e.ctype(out)}>({e.ptr(x.id)}, {e.ptr(out.id, const=False)}, "
                f"{out.cols}, r0, r1, c0, c1);")


SPEC = Cast()
