"""Run from tree p1: probe rates thrice, then mlp-b64 / mlp-b8 unrated and rated: per-CTA tile times of op0/op1."""
import sys, json
import numpy as np, torch
sys.path.insert(0, ".")
from ark_runtime import models, sm_rates
from ark_runtime.runtime import Runtime
from bench.loop import _inputs
rs = [np.array(sm_rates.measure(132)) for _ in range(3)]
for r in rs:
    print("rates min %.3f max %.3f fast(>1.05) %s" % (r.min(), r.max(), np.nonzero(r > 1.05)[0].tolist()))
print("corr between probes", np.corrcoef(rs)[0, 1:].round(3).tolist(), np.corrcoef(rs[1], rs[2])[0, 1].round(3))
rate = np.median(rs, axis=0)
out = {"rates": [r.tolist() for r in rs]}
for name in ("mlp-b64", "mlp-b8"):
    m = models.named(name)
    inputs = _inputs(torch, m)
    for label, kw in (("equal", dict(sm_rates=None)), ("rated", dict(sm_rates=tuple(round(float(x), 3) for x in rate)))):
        with Runtime(m, bind=inputs, **kw) as rt:
            rt.run(3); rt.wait()
            per = []
            for _ in range(3):
                rt.run(17); rt.wait(timeout=60)
                ns = rt._arrays["tile_ns"].get().reshape(-1, 2).astype(np.int64)
                per.append((ns[:, 1] - ns[:, 0]) / 1e3)
            g = np.median(np.diff(rt.iteration_ns()) / 1e3)
            dur = np.median(per, axis=0)
            sm = np.array(rt.plan.estimate["sm"])
            ops = np.array([t["op"] for t in rt.plan.tiles])
            line = f"{name} {label}: iter {g:.2f} us;"
            for op in sorted(set(ops[[t['sm'] >= 0 for t in rt.plan.tiles]].tolist()) or {0, 1}):
                sel = ops == op
                d, s = dur[sel], sm[sel]
                c = np.corrcoef(d, rate[s])[0, 1] if len(set(s)) > 2 else float('nan')
                line += f" op{op} tiles {sel.sum()} mean {d.mean():.2f} min {d.min():.2f} max {d.max():.2f} corr(rate) {c:.2f};"
            print(line, flush=True)
            out[f"{name}/{label}"] = {"iter": float(g), "dur": dur.tolist(), "sm": sm.tolist(), "ops": ops.tolist()}
json.dump(out, open(sys.argv[1], "w"))
