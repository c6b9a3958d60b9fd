"""What a model computes, in float64 NumPy: op by op (`evaluate`), and tile by tile as a plan runs (`run_plan`).

`run_plan` runs the plan's per-SM streams in an interleaving the counters allow, and computes each tile from
only the regions it declares it reads: everything else of its inputs is NaN when it runs, and every tensor
an op writes starts as NaN. A tile that reads outside its regions, or before its producers ran, leaves NaN
or a wrong value in the result, so comparing `run_plan` with `evaluate` checks the tiling, the dependencies
and the schedule together. These are also the semantics the GPU kernel's op templates implement (GELU is
the tanh form; layernorm and rmsnorm scale by their weights, layernorm adds its bias).
"""

from __future__ import annotations

import math

import numpy as np

from ark_runtime.model import Model, Op
from ark_runtime.plan_check import run_problems

UNARY_FNS = {
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0),
    "exp": np.exp,
    "neg": np.negative,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "identity": lambda x: x,
}
BINARY_FNS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum}
REDUCE_FNS = {"sum": np.sum, "max": np.max, "mean": np.mean}


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _attention(q, k, v, heads: int, causal: bool):
    """Per head, each query over keys 0..i (causal) or all: only those key and value rows are touched."""
    s, e = q.shape[-2], q.shape[-1]
    d = e // heads
    q2, k2, v2 = (t.reshape(-1, s, e) for t in (q, k, v))
    out = np.empty_like(q2)
    for b in range(q2.shape[0]):
        for h in range(heads):
            cols = slice(h * d, (h + 1) * d)
            for i in range(s):
                n = i + 1 if causal else s
                scores = k2[b, :n, cols] @ q2[b, i, cols] / math.sqrt(d)
                w = np.exp(scores - scores.max())
                out[b, i, cols] = (w / w.sum()) @ v2[b, :n, cols]
    return out.reshape(q.shape)


def _epilogue(op: Op, value: np.ndarray, extras: list[np.ndarray]) -> np.ndarray:
    """An op's fused elementwise steps (fusion.py) on its result: ("in", 0) the result, ("in", j) extras[j - 1]."""
    steps = op.attr("epilogue")
    if not steps:
        return value
    ins = [value] + [e.reshape(value.shape) if e.size == value.size else e for e in extras]
    values: list[np.ndarray] = []
    for fn, *refs in steps:
        xs = [ins[j] if where == "in" else values[j] for where, j in refs]
        values.append(UNARY_FNS[fn](*xs) if fn in UNARY_FNS else BINARY_FNS[fn](*xs))
    return values[-1]


def apply(op: Op, args: list[np.ndarray]) -> np.ndarray:
    """One op on whole tensors (float64; ids as ints)."""
    if op.kind == "unary":
        return UNARY_FNS[op.fn](args[0])
    if op.kind == "binary":
        return BINARY_FNS[op.fn](args[0], args[1])
    if op.kind == "fused":
        values: list[np.ndarray] = []
        for fn, *refs in op.attr("steps"):
            xs = [args[j] if where == "in" else values[j] for where, j in refs]
            values.append(UNARY_FNS[fn](*xs) if fn in UNARY_FNS else BINARY_FNS[fn](*xs))
        return values[-1]
    if op.kind == "reduce":
        return REDUCE_FNS[op.fn](args[0], axis=-1, keepdims=True)
    if op.kind == "softmax":
        return _softmax(args[0])
    if op.kind == "layernorm":
        x, w, b = args
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + op.attr("eps")) * w + b
    if op.kind == "rmsnorm":
        x, w = args
        return x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + op.attr("eps")) * w
    if op.kind == "matmul" and op.attr("k_splits"):  # split_k.py: part s's sums at rows s * M ..
        a, b = args[0].reshape(-1, args[1].shape[0]), args[1]
        kp = b.shape[0] // op.attr("k_splits")
        return np.concatenate([a[:, s * kp:(s + 1) * kp] @ b[s * kp:(s + 1) * kp] for s in range(op.attr("k_splits"))])
    if op.kind == "split_sum":
        parts = op.attr("k_splits")
        return _epilogue(op, args[0].reshape(parts, -1, args[0].shape[-1]).sum(axis=0), args[1:])
    if op.kind == "matmul":
        return _epilogue(op, args[0] @ args[1], args[2:])
    if op.kind == "attention":
        return _attention(*args, heads=op.attr("heads"), causal=op.attr("causal", True))
    if op.kind == "rope":
        x, cos, sin = args
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x1 * sin + x2 * cos
        return out
    if op.kind == "embedding":
        table, ids = args
        return table[np.nan_to_num(ids, nan=-1).astype(np.int64)]
    if op.kind == "copy":
        return args[0].copy()
    raise ValueError(f"op kind {op.kind!r} has no reference")


def _check_inputs(model: Model, inputs: dict[str, np.ndarray]) -> dict[int, np.ndarray]:
    given = {}
    for t in model.tensors:
        if t.producer is not None:
            continue
        if t.name not in inputs:
            raise ValueError(f"input {t.name!r} {t.shape} is missing")
        a = np.asarray(inputs[t.name], dtype=np.float64)
        if a.shape != t.shape:
            raise ValueError(f"input {t.name!r} has shape {a.shape}, the model says {t.shape}")
        given[t.id] = a
    return given


def evaluate(model: Model, inputs: dict[str, np.ndarray]) -> dict[int, np.ndarray]:
    """Every tensor of the model, op by op."""
    values = _check_inputs(model, inputs)
    for op in model.ops:
        values[op.output] = apply(op, [values[i] for i in op.inputs])
    return values


def run_plan(plan, model: Model, inputs: dict[str, np.ndarray], seed: int = 0,
             iterations: int = 2) -> dict[int, np.ndarray]:
    """Every tensor, computed tile by tile in an order the plan's streams allow (see the module's docstring)."""
    values = _check_inputs(model, inputs)
    for op in model.ops:
        out = model.tensors[op.output]
        values[out.id] = np.full(out.shape, np.nan)
    ops = {op.id: op for op in model.ops}

    def view(tid: int) -> np.ndarray:
        t = model.tensors[tid]
        return values[tid].reshape(t.rows, t.cols)

    def run(tile_id: int, iteration: int) -> None:
        tile = plan.tiles[tile_id]
        op = ops[tile["op"]]
        visible = {tid: np.full((model.tensors[tid].rows, model.tensors[tid].cols), np.nan) for tid in op.inputs}
        for tid, r0, r1, c0, c1 in tile["reads"]:
            visible[tid][r0:r1, c0:c1] = view(tid)[r0:r1, c0:c1]
        args = [visible[tid].reshape(model.tensors[tid].shape) for tid in op.inputs]
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            result = apply(op, args)
        out = model.tensors[op.output]
        _, r0, r1, c0, c1 = tile["writes"]
        view(out.id)[r0:r1, c0:c1] = result.reshape(out.rows, out.cols)[r0:r1, c0:c1]

    problems = run_problems(plan, iterations=iterations, seed=seed, on_run=run)
    if problems:
        raise ValueError("the plan did not run: " + "; ".join(problems[:3]))
    return values
