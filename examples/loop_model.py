"""A model as one resident GPU kernel: a pre-LN transformer block whose result the kernel copies to pinned host
memory itself, launched once, run many times with no launch per run, checked against a float64 reference, then
where its time went (per op, by the GPU clock) and how its copy went (path, bytes, time).

    .venv/bin/python -m examples.loop_model                      # hidden 512, 8 heads, seq 128, bf16
    .venv/bin/python -m examples.loop_model --seq 512 --iterations 100
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from ark_runtime import models
from ark_runtime.model import Model

TOLERANCE = {"fp32": 2e-4, "fp16": 2e-2, "bf16": 6e-2}  # of the output's scale


def block(seq: int, hidden: int, heads: int, dtype: str) -> Model:
    """The pre-LN block the loop benchmark measures (ark_runtime/models.py shows how it is written), its result
    copied to pinned host memory by the kernel itself."""
    m = models.transformer_block(seq, hidden, heads, dtype)
    m.output(m.copy(m.tensors[m.outputs[0]], "host"))
    return m


def inputs_for(m: Model, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard normal values; weights scaled by 1/sqrt(fan-in), as a model's are."""
    rng = np.random.default_rng(seed)
    weights = {op.inputs[1] for op in m.ops if op.kind == "matmul"}
    return {t.name: rng.standard_normal(t.shape) / (math.sqrt(t.rows) if t.id in weights else 1.0)
            for t in m.tensors if t.producer is None}


def run(seq: int, hidden: int, heads: int, dtype: str, iterations: int, sms: int | None) -> float:
    """Runs the model; returns its largest error against the float64 reference, relative to the output's scale."""
    from ark_runtime.host_values import from_bits, to_bits
    from ark_runtime.reference import evaluate
    from ark_runtime.runtime import Runtime

    m = block(seq, hidden, heads, dtype)
    values = inputs_for(m)
    by_name = {t.name: t for t in m.tensors}
    as_gpu_holds = {n: from_bits(by_name[n], to_bits(by_name[n], v)).astype(np.float64) for n, v in values.items()}
    out = m.tensors[m.outputs[-1]]
    want = evaluate(m, as_gpu_holds)[out.id]
    with Runtime(m, sms=sms) as rt:
        for name, v in values.items():
            rt.set(name, v)
        rt.run(iterations)  # queued to the resident kernel: no launch
        rt.wait()
        got = rt.get(out.name)
        stamps = rt.iteration_ns()
        print(f"{m.name}: seq {seq}, hidden {hidden}, {heads} heads, {dtype}, on {rt.device_name}: "
              f"{len(rt.plan.tiles)} tiles on {rt.plan.num_sms} SMs, {iterations} iterations")
        if len(stamps) > 1:
            print(f"per iteration (GPU clock): {np.median(np.diff(stamps)) / 1e3:.1f} us median")
        print(rt.profile().table(top=6))
        for r in rt.report():
            print(f"copy of {r.tensor}: {r.bytes} bytes by {r.path} in {r.time_us:.1f} us"
                  f"{' (SM stores)' if r.uses_sms else ' (no SM moved the bytes)'}")
    err = float(np.abs(got - want).max() / max(1.0, float(np.abs(want).max())))
    print(f"largest error against float64: {err:.2e} of the output's scale (allowed {TOLERANCE[dtype]:.0e})")
    return err


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--dtype", choices=sorted(TOLERANCE), default="bf16")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--sms", type=int, help="SMs for the loop kernel (default: all)")
    a = p.parse_args(argv)
    for name in ("seq", "hidden", "heads", "iterations"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1, not {getattr(a, name)}")
    if a.hidden % a.heads:
        p.error(f"--hidden {a.hidden} is not a multiple of --heads {a.heads}: each head takes hidden / heads columns")
    from ark_runtime.model import ModelError
    from ark_runtime.runtime import LoopError
    from driver.errors import ArkdmaError

    try:
        err = run(a.seq, a.hidden, a.heads, a.dtype, a.iterations, a.sms)
    except (LoopError, ModelError, ArkdmaError) as exc:
        print(f"loop_model: {exc}", file=sys.stderr)
        return 1
    return 0 if err <= TOLERANCE[a.dtype] else 1


if __name__ == "__main__":
    sys.exit(main())
