"""Elementwise chains fused into one op by fusion.py: steps (fn, operand...) computed in registers, each operand
("in", j) for input j or ("step", k) for an earlier step's value (elementwise.cuh's map_tile over a generated
functor). A chain fused into a matmul's or a split-K sum's stores (an epilogue) uses the same steps."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import Op
from ark_runtime.ops import binary, unary
from ark_runtime.ops.blocks import elementwise_tiles
from ark_runtime.ops.spec import OpSpec


def apply_steps(steps, ins: list[np.ndarray]) -> np.ndarray:
    """The steps on float64 arrays: ("in", j) is ins[j], ("step", k) step k's value; the last step's value."""
    values: list[np.ndarray] = []
    for fn, *refs in steps:
        xs = [ins[j] if where == "in" else values[j] for where, j in refs]
        values.append(unary.FNS[fn][0](*xs) if fn in unary.FNS else binary.FNS[fn][0](*xs))
    return values[-1]


def apply_epilogue(steps, value: np.ndarray, extras: list[np.ndarray]) -> np.ndarray:
    """An op's fused elementwise steps (fusion.py) on its result: ("in", 0) is the result, ("in", j) extras[j - 1] (each
    of the result's size reshaped to it; others broadcast)."""
    if not steps:
        return value
    ins = [value] + [e.reshape(value.shape) if e.size == value.size else e for e in extras]
    return apply_steps(steps, ins)


def step_call(fn: str, refs: list[tuple], index: str, mix: str = "") -> str:
    """One step's call: operand ("in", j) is a{j}, ("step", k) is s{k}, each followed by `index`. With `mix` (the
    element's place among a thread's), a unary step shares its exponentials between the SFU and the FMA pipes
    (numeric.cuh's unary_mix)."""
    xs = ", ".join(f"{'a' if where == 'in' else 's'}{j}{index}" for where, j in refs)
    if fn not in unary.FNS:
        return f"ark::binary<ark::{binary.FNS[fn][1]}>({xs})"
    code = unary.FNS[fn][1]
    return f"ark::unary_mix<ark::{code}>({xs}, {mix})" if mix else f"ark::unary<ark::{code}>({xs})"


class Fused(OpSpec):
    kind = "fused"
    written_by_passes = True

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        return apply_steps(op.attr("steps"), args)

    def variant(self, model, op: Op, device) -> dict:
        return {"template": "map_tile", "steps": len(op.attr("steps"))}

    def tiles(self, tm, op: Op, v: dict) -> None:
        elementwise_tiles(tm, steps=len(op.attr("steps")))

    def emit(self, e, op: Op, v: dict) -> str:
        # every step for all of a thread's N elements before the next step: N chains side by side
        out = e.tensor(op.output)
        name = f"Fused{op.id}"
        each = "#pragma unroll\n    for (int u = 0; u < N; ++u)"
        members, body = [], []
        for j, i in enumerate(op.inputs):
            t = e.tensor(i)
            s = e.broadcast_map(f"{name}In{j}", t, out)
            members.append(f"  const {e.ctype(t)}* in{j};")
            body.append(f"    float a{j}[N];\n{each} a{j}[u] = ark::ld(in{j}, {f'{s}::at(f[u])' if s else 'f[u]'});")
        steps = op.attr("steps")
        for k, (fn, *refs) in enumerate(steps):
            body.append(f"    float s{k}[N];  // {fn}\n{each} s{k}[u] = {step_call(fn, refs, '[u]', mix='u')};")
        e.structs.append(f"struct {name} {{  // {len(steps)} elementwise ops in registers\n"
                         + "\n".join(members) + "\n"
                         "  template <int N>\n"
                         "  __device__ __forceinline__ void batch(const long long (&f)[N], float (&v)[N]) const {\n"
                         + "\n".join(body) + f"\n{each} v[u] = s{len(steps) - 1}[u];\n  }}\n}};")
        args = ", ".join(e.ptr(i) for i in op.inputs)
        return f"ark::map_tile({name}{{{args}}}, {e.ptr(out.id, const=False)}, {out.cols}, r0, r1, c0, c1);"

    def describe(self, op: Op) -> str:
        steps = op.attr("steps")
        return f"fused {steps[0][0]}+{len(steps) - 1}"


SPEC = Fused()
