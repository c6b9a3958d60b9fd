"""What a model computes, in float64 NumPy: op by op (`evaluate`), and tile by tile as a plan runs (`run_plan`).

`run_plan` runs the plan's per-SM streams in an interleaving the counters allow, and computes each tile from
only the regions it declares it reads: everything else of its inputs is NaN when it runs, and every tensor
an op writes starts as NaN. A tile that reads outside its regions, or before its producers ran, leaves NaN
or a wrong value in the result, so comparing `run_plan` with `evaluate` checks the tiling, the dependencies
and the schedule together. Each op's float64 semantics are its spec's (ark_runtime/ops/<kind>.py `reference`), which
the GPU kernel's op templates implement (GELU is the tanh form; layernorm and rmsnorm scale by their weights,
layernorm adds its bias); an id outside its table raises BadIndex, where the kernel faults.
"""

from __future__ import annotations

import numpy as np

from ark_runtime.model import Model, Op
from ark_runtime.ops import spec
from ark_runtime.ops.spec import BadIndex
from ark_runtime.plan_check import run_problems

__all__ = ["BadIndex", "apply", "evaluate", "run_plan"]


def apply(op: Op, args: list[np.ndarray]) -> np.ndarray:
    """One op on whole tensors (float64; ids as ints), as its spec computes it; BadIndex for an id outside its table."""
    return spec(op.kind).reference(op, args)


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


def evaluate(model: Model, inputs: dict[str, np.ndarray], iterations: int = 1) -> dict[int, np.ndarray]:
    """Every tensor of the model, op by op, after `iterations` runs of it: states (Model.states) keep what the ops
    wrote from one run to the next, and an op output that writes a state in place is the state as it wrote it."""
    mem = _check_inputs(model, inputs)  # per tensor root: its memory's values
    values: dict[int, np.ndarray] = {}
    for _ in range(iterations):
        for op in model.ops:
            result = np.asarray(apply(op, [mem[model.tensors[i].root] for i in op.inputs]), np.float64)
            mem[model.tensors[op.output].root] = values[op.output] = result
    for t in model.tensors:
        if t.producer is None:
            values[t.id] = mem[t.id]
    return values


def run_plan(plan, model: Model, inputs: dict[str, np.ndarray], seed: int = 0,
             iterations: int = 2) -> dict[int, np.ndarray]:
    """Every tensor, computed tile by tile in an order the plan's streams allow (see the module's docstring), after
    `iterations` runs: compare with evaluate(..., iterations) where the model has states."""
    mem = _check_inputs(model, inputs)  # per tensor root: its memory's values
    for op in model.ops:
        out = model.tensors[op.output]
        if out.alias is None:
            mem[out.id] = np.full(out.shape, np.nan)
    ops = {op.id: op for op in model.ops}

    def view(tid: int) -> np.ndarray:
        t = model.tensors[tid]
        return mem[t.root].reshape(t.rows, t.cols)

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
        view(out.id)[r0:r1, c0:c1] = np.asarray(result, np.float64).reshape(out.rows, out.cols)[r0:r1, c0:c1]

    problems = run_problems(plan, iterations=iterations, seed=seed, on_run=run)
    if problems:
        raise ValueError("the plan did not run: " + "; ".join(problems[:3]))
    return {t.id: mem[t.root] for t in model.tensors}
