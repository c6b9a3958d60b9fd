"""Which SMs sit idle while a matmul of fewer tiles than SMs streams its weights: the plan's choice, or the CTAs
whose tiles were slowest. Permutes the plan's per-SM streams between CTAs (a valid plan: the same streams, dealt
to other CTAs), measures the iteration (median of 3 x 65) and each op's span, alternately."""
import sys
import numpy as np
import torch

sys.path.insert(0, ".")
import ark_runtime.runtime as R
from ark_runtime import models
from bench.loop import _inputs

orig = R.build_plan
perm = None


def patched(*a, **k):
    p = orig(*a, **k)
    if perm is not None:
        s = list(p.streams)
        p.streams = [s[perm[i]] for i in range(len(s))]
    return p


R.build_plan = patched


def run(name, label):
    m = models.named(name)
    inputs = _inputs(torch, m)
    meds = []
    with R.Runtime(m, bind=inputs) as rt:
        rt.run(3); rt.wait()
        per_sm = {}
        for _ in range(3):
            rt.run(65); rt.wait(timeout=60)
            meds.append(float(np.median(np.diff(rt.iteration_ns()))) / 1e3)
            ns = rt._arrays["tile_ns"].get().reshape(-1, 2)
            for sm, stream in enumerate(rt.plan.streams):
                for it in stream:
                    if it["op"] == "run" and rt.plan.tiles[it["tile"]]["op"] == 0:
                        per_sm.setdefault(sm, []).append((ns[it["tile"], 1] - ns[it["tile"], 0]) / 1e3)
        p = rt.profile()
        spans = [round(o.span_us, 1) for o in p.ops]
        streams = rt.plan.streams
        first_op = {sm for sm, stream in enumerate(streams)
                    if any(i["op"] == "run" and rt.plan.tiles[i["tile"]]["op"] == 0 for i in stream)}
    t = {sm: float(np.mean(v)) for sm, v in per_sm.items()}
    print(f"{label:8s} {name:8s} med {' '.join(f'{v:.2f}' for v in meds)} spans {spans} op0 tile "
          f"min {min(t.values()):.2f} max {max(t.values()):.2f}", flush=True)
    return t, first_op, len(streams)


for name in sys.argv[1].split(","):
    perm = None
    t, first_op, n = run(name, "plan")
    idle = [sm for sm in range(n) if sm not in first_op]
    if not idle:
        continue
    # the CTAs of the slowest op-0 tiles (by their own SM) take the idle streams
    by_speed = sorted(t, key=lambda sm: -t[sm])
    slow = by_speed[:len(idle)]
    print(f"  idle streams {idle}; slowest CTAs {slow} ({[round(t[s], 2) for s in slow]}); fastest "
          f"{by_speed[-3:]}", flush=True)
    swap = list(range(n))
    for a, b in zip(slow, idle):
        swap[a], swap[b] = b, a
    rng = np.random.default_rng(1)
    rand = list(range(n))
    for a, b in zip(rng.choice(sorted(first_op), len(idle), replace=False).tolist(), idle):
        rand[a], rand[b] = b, a
    for rnd in range(2):
        perm = swap
        run(name, "slowidle")
        perm = rand
        run(name, "randidle")
        perm = None
        run(name, "plan")
