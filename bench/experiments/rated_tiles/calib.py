"""Run from tree p3: rates from the loop kernel's own tile times (pinned equal tiles), then rated plans."""
import sys, json
import numpy as np, torch
sys.path.insert(0, ".")
from ark_runtime import models
from ark_runtime.runtime import Runtime
from bench.loop import _inputs

def per_cta(rt, reps=5):
    per = []
    for _ in range(reps):
        rt.run(1); rt.wait(timeout=60)
        ns = rt._arrays["tile_ns"].get().reshape(-1, 2).astype(np.int64)
        per.append((ns[:, 1] - ns[:, 0]) / 1e3)
    dur = np.median(per, axis=0)
    out = {}
    for t in rt.plan.tiles:
        if t["sm"] >= 0:
            out.setdefault(t["op"], {})[t["sm"]] = (dur[t["id"]], t["writes"][4] - t["writes"][3])
    return out

def iters(rt, n=3):
    meds = []
    for _ in range(n):
        rt.run(65); rt.wait(timeout=60)
        meds.append(float(np.median(np.diff(rt.iteration_ns()) / 1e3)))
    return meds

def rates_of(ctas, prev=None):
    ops = sorted(ctas)
    n = len(ctas[ops[0]])
    per_op = []
    for op in ops:
        w = np.array([ctas[op][i][1] for i in range(n)], float); d = np.array([ctas[op][i][0] for i in range(n)])
        r = w / d
        per_op.append(r / r.mean())
    r = np.mean(per_op, axis=0)
    return tuple(round(float(x), 3) for x in r / r.mean()), per_op

res = {}
for name in sys.argv[2].split(","):
    m = models.named(name)
    inputs = _inputs(torch, m)
    with Runtime(m, bind=inputs, sm_rates=None) as rt:
        rt.run(3); rt.wait(); base = iters(rt)
        n = rt.plan.num_sms
    print(f"{name} equal unpinned: {base}", flush=True)
    rs = []
    for launch in range(2):
        with Runtime(m, bind=inputs, sm_rates=(1.0,) * n) as rt:
            rt.run(3); rt.wait(); it = iters(rt)
            c = per_cta(rt)
        r, per_op = rates_of(c)
        rs.append(np.array(r))
        spans = {op: (min(v[0] for v in c[op].values()), max(v[0] for v in c[op].values())) for op in c}
        print(f"{name} equal pinned launch {launch}: {it}; tile min/max {spans}; op corr {np.corrcoef(per_op)[0,1]:.2f}", flush=True)
    print(f"{name} rate corr across launches {np.corrcoef(rs)[0,1]:.3f}; fast(>1.08) {np.nonzero(rs[0] > 1.08)[0].tolist()}", flush=True)
    rate = tuple(round(float(x), 3) for x in np.mean(rs, axis=0))
    for step in range(3):
        with Runtime(m, bind=inputs, sm_rates=rate) as rt:
            rt.run(3); rt.wait(); it = iters(rt)
            c = per_cta(rt)
        spans = {op: (round(min(v[0] for v in c[op].values()), 2), round(max(v[0] for v in c[op].values()), 2)) for op in c}
        print(f"{name} rated step {step}: {it}; tile min/max {spans}", flush=True)
        r2, _ = rates_of(c)
        rate = tuple(round(float(a * b), 3) for a, b in zip(rate, r2))
        rate = tuple(round(x / np.mean(rate), 3) for x in rate)
    res[name] = {"rates": [list(x) for x in rs]}
json.dump(res, open(sys.argv[1], "w"))
