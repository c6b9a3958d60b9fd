"""Top-k / top-p sampling with a seed, on the GPU (sample.cuh's sample_rows): for each row of logits, one column drawn
from softmax(logits / temperature) cut to its `top_k` largest elements (0: all), then to the smallest set of those,
largest first, whose probability reaches `top_p` of theirs (nucleus; ties between equal elements go to the lower
column), renormalized; int32 [..., 1] like argmax. temperature=0 (or top_k=1) is greedy: argmax.cuh's argmax_rows.

The draw: u in [0, 1) from Philox-4x32-10 of (seed, step, row) (ark_runtime/philox.py, philox.cuh), where `step` is an
int32 tensor the GPU holds, of one element or one per row (a decode position: every iteration draws afresh without a
new plan), and row is the row of the logits' 2-D view; the column is the first, in column order, whose cumulative
probability over the kept set exceeds u. So a draw is reproducible, and the float64 reference here gives the GPU's
draw except where u times the kept mass, or top_p times the top_k mass, falls within float rounding of a boundary
between cumulative sums (the kernel sums in float32 in a fixed order; `boundary_margin` measures how near a draw is).

A row whose largest element is not finite (NaN, +inf, or every element -inf) gives its argmax, NumPy's rule, as the
kernel does. Row-wise: one CTA a row, row blocks as tiles (blocks.py)."""

from __future__ import annotations

import math
import struct

import numpy as np

from ark_runtime.graph import ModelError, Op, Tensor
from ark_runtime.ops.blocks import row_block_rows, row_blocks, row_smem, row_team
from ark_runtime.ops.spec import Built, OpSpec, arity, esize, no_attrs, require_float
from ark_runtime.philox import SEED_LIMIT, sample_uniform
from ark_runtime.tiling import Region

SMEM = 9488  # sample.cuh's SAMPLE_SMEM: argmax's slots, 16 double sums a warp and the CTA's, a list of 1024 kept
MAX_TEMPERATURE = 1e6  # log2(e) / temperature stays a normal float; hotter is uniform to float precision anyway
LOG2E = math.log2(math.e)


def _number(v) -> bool:
    return not isinstance(v, (bool, np.bool_)) and isinstance(v, (int, float, np.integer, np.floating))


def _int(v) -> bool:
    return not isinstance(v, (bool, np.bool_)) and isinstance(v, (int, np.integer))


def check_args(cols: int, seed, temperature, top_k, top_p) -> dict:
    """The sampling arguments as stored on the op, or ModelError saying which is wrong and what it may be."""
    if not _int(seed) or not 0 <= int(seed) < SEED_LIMIT:
        raise ModelError(f"sample: seed={seed!r} must be an int in 0 .. 2**64 - 1")
    if not _number(temperature) or not (temperature == 0 or 0 < temperature <= MAX_TEMPERATURE):
        raise ModelError(f"sample: temperature={temperature!r} must be 0 (greedy: the argmax) or a number in (0, "
                         f"{MAX_TEMPERATURE:g}]")
    if not _int(top_k) or not 0 <= int(top_k) <= cols:
        raise ModelError(f"sample: top_k={top_k!r} must be an int in 0 .. {cols} (the logits' last axis; 0 keeps "
                         "every element)")
    if not _number(top_p) or not 0 < top_p <= 1:
        raise ModelError(f"sample: top_p={top_p!r} must be a number in (0, 1] (1 keeps every element)")
    return {"seed": int(seed), "temperature": float(temperature), "top_k": int(top_k), "top_p": float(top_p)}


def greedy(temperature: float, top_k: int) -> bool:
    return temperature == 0 or top_k == 1


def _kept(x: np.ndarray, temperature: float, top_k: int, top_p: float):
    """For rows of finite largest element: p = exp((x - max) / temperature), the kept mask (top_k, then top_p), the
    top_p target and the cumulative sums it is set against (None when top_p is 1)."""
    order = np.argsort(-x, axis=-1, kind="stable")  # largest first, the lower column first among equals
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(x.shape[-1])[None], axis=-1)
    m = x.max(axis=-1, keepdims=True)
    p = np.exp((x - m) / temperature)
    kept = rank < top_k if top_k else np.ones(x.shape, bool)
    if top_p >= 1:
        return p, kept, None, None
    desc = np.cumsum(np.take_along_axis(np.where(kept, p, 0.0), order, axis=-1), axis=-1)
    target = top_p * desc[:, -1:]
    n = np.minimum((desc < target).sum(axis=-1) + 1, x.shape[-1])  # the prefix that reaches the target
    return p, kept & (rank < n[:, None]), target, desc


def _finite_rows(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.isfinite(x.max(axis=-1))


def sample_rows(logits, steps, seed: int, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                rows=None) -> np.ndarray:
    """The float64 reference: the column drawn in each row of `logits` [R, V] (int64 [R]), with `steps` one int per
    row (or one for all) and `rows` the row numbers the hash takes (0 .. R-1 unless given)."""
    x = np.asarray(logits, np.float64)
    x = x.reshape(-1, x.shape[-1])
    r = np.arange(x.shape[0]) if rows is None else np.asarray(rows, np.int64).reshape(-1)
    args = check_args(x.shape[-1], seed, temperature, top_k, top_p)
    out = np.argmax(x, axis=-1)  # NumPy's rule: the first NaN, else the lowest column of the largest
    live = _finite_rows(x) if not greedy(args["temperature"], args["top_k"]) else np.zeros(x.shape[0], bool)
    if live.any():
        with np.errstate(under="ignore", over="ignore"):
            p, kept, _, _ = _kept(x[live], args["temperature"], args["top_k"], args["top_p"])
        cum = np.cumsum(np.where(kept, p, 0.0), axis=-1)  # column order, as the kernel
        u = sample_uniform(args["seed"], np.broadcast_to(np.asarray(steps, np.int64).reshape(-1), (x.shape[0],))[live],
                           r[live])
        target = u * cum[:, -1]
        out[live] = np.minimum((cum <= target[:, None]).sum(axis=-1), x.shape[-1] - 1)
    return out


def boundary_margin(logits, steps, seed: int, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                    rows=None) -> np.ndarray:
    """How near each row's draw is to going another way, relative: the distance of u times the kept mass from the
    nearest boundary between cumulative sums over the kept mass, or of top_p times the top_k mass from the nearest
    one of those (the smaller); inf for greedy rows. A draw the GPU makes otherwise than the reference has a margin
    within float32 rounding (about 1e-6)."""
    x = np.asarray(logits, np.float64)
    x = x.reshape(-1, x.shape[-1])
    r = np.arange(x.shape[0]) if rows is None else np.asarray(rows, np.int64).reshape(-1)
    args = check_args(x.shape[-1], seed, temperature, top_k, top_p)
    out = np.full(x.shape[0], np.inf)
    live = _finite_rows(x) if not greedy(args["temperature"], args["top_k"]) else np.zeros(x.shape[0], bool)
    if not live.any():
        return out
    with np.errstate(under="ignore", over="ignore"):
        p, kept, target, desc = _kept(x[live], args["temperature"], args["top_k"], args["top_p"])
    cum = np.cumsum(np.where(kept, p, 0.0), axis=-1)
    u = sample_uniform(args["seed"], np.broadcast_to(np.asarray(steps, np.int64).reshape(-1), (x.shape[0],))[live],
                       r[live])
    near = np.abs(cum - (u * cum[:, -1])[:, None]).min(axis=-1) / cum[:, -1]
    if target is not None:
        near = np.minimum(near, np.abs(desc - target).min(axis=-1) / desc[:, -1])
    out[live] = near
    return out


def _bits(v: float) -> str:
    """A float32's bits as CUDA text (the template reads them back, inf included)."""
    return f"{struct.unpack('<I', struct.pack('<f', v))[0]:#010x}u"


def scale(temperature: float) -> tuple[float, float]:
    """log2(e) / temperature as the kernel takes it: s, rounded to float32 (inf where that overflows), and s_lo, what
    the rounding left out (to float32; 0 beside an inf s)."""
    exact = LOG2E / temperature
    with np.errstate(over="ignore"):
        s = float(np.float32(exact))
    return s, (float(np.float32(exact - s)) if math.isfinite(s) else 0.0)


class Sample(OpSpec):
    kind = "sample"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("sample", inputs, 2)
        no_attrs("sample", attrs, ("seed", "temperature", "top_k", "top_p"))
        x, step = inputs
        require_float("sample", x)
        if step.dtype != "int32" or step.elements not in (1, x.rows):
            raise ModelError(f"sample: the step {step.name} must be an int32 tensor of one element or one per row of "
                             f"the logits ({x.rows}), not {step.dtype} {step.shape}")
        if "seed" not in attrs:
            raise ModelError("sample: give seed=, an int in 0 .. 2**64 - 1")
        return Built(x.shape[:-1] + (1,), "int32", check_args(x.cols, attrs["seed"], attrs.get("temperature", 1.0),
                                                               attrs.get("top_k", 0), attrs.get("top_p", 1.0)))

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        x, step = args
        rows = x.reshape(-1, x.shape[-1])
        steps = np.broadcast_to(np.asarray(step, np.float64).reshape(-1), (rows.shape[0],))
        # a step not yet written (reference.run_plan): nothing known, unless greedy (the argmax reads no step)
        unknown = np.isnan(steps) & (not greedy(op.attr("temperature"), op.attr("top_k")))
        out = sample_rows(rows, np.where(unknown, 0, steps).astype(np.int64), op.attr("seed"),
                          op.attr("temperature"), op.attr("top_k"), op.attr("top_p")).astype(np.float64)
        out[unknown] = np.nan
        return out.reshape(x.shape[:-1] + (1,))

    def variant(self, model, op: Op, device) -> dict:
        x, out = model.tensors[op.inputs[0]], model.tensors[op.output]
        per = row_block_rows(out.rows, x.cols, device.num_sms)
        if greedy(op.attr("temperature"), op.attr("top_k")):
            return {"template": "argmax_rows", "rows_per_tile": per,
                    "team": row_team(x.dtype, out.rows, x.cols, device.num_sms)}
        return {"template": "sample_rows", "rows_per_tile": per}

    def tiles(self, tm, op: Op, v: dict) -> None:
        x, step, out = tm.ins[0], tm.ins[1], tm.out
        passes = 2  # the argmax and the draw; a radix select reads the row once a 4-bit digit of the key
        digits = 2 * esize(x)
        passes += digits if 0 < op.attr("top_k") < x.cols else 0
        passes += digits if op.attr("top_p") < 1 else 0
        if v["template"] == "argmax_rows":
            passes = 1
        for r0, r1, _, _ in row_blocks(out, tm.num_sms, x.cols):
            reads = [Region(x.id, r0, r1, 0, x.cols)]
            if v["template"] == "sample_rows":
                reads.append(Region.whole(step))
            n = (r1 - r0) * x.cols
            tm.add(r0, r1, 0, 1, reads, passes * n * esize(x) + (r1 - r0) * tm.esize, 8 * passes * n)

    def emit(self, e, op: Op, v: dict) -> str:
        x, step, out = e.tensor(op.inputs[0]), e.tensor(op.inputs[1]), e.tensor(op.output)
        if v["template"] == "argmax_rows":
            row_smem(e)
            return (f"ark::argmax_rows<{e.ctype(x)}, {v['team']}>({e.ptr(x.id)}, {e.ptr(out.id, const=False)}, "
                    f"{x.cols}, r0, r1, smem);")
        e.need_smem(SMEM, f"static_assert(ark::SAMPLE_SMEM <= {SMEM}, \"ark_runtime/ops/sample.py's SMEM\");")
        s, s_lo = scale(op.attr("temperature"))
        args = (f"ark::SampleArgs<{op.attr('top_k')}, {_bits(s)}, {_bits(s_lo)}, {_bits(op.attr('top_p'))}, "
                f"{op.attr('seed'):#x}ull>")
        return (f"ark::sample_rows<{e.ctype(x)}, {x.cols}, {str(step.elements > 1).lower()}, {args}>("
                f"{e.ptr(x.id)}, {e.ptr(step.id)}, {e.ptr(out.id, const=False)}, r0, r1, smem);")

    def describe(self, op: Op) -> str:
        if greedy(op.attr("temperature"), op.attr("top_k")):
            return "sample greedy"
        return f"sample T={op.attr('temperature'):g} k={op.attr('top_k')} p={op.attr('top_p'):g}"


SPEC = Sample()
