"""Per-CTA tile durations of the MLP's two matmuls: systematic per SM or random?"""
import sys
import numpy as np, torch
sys.path.insert(0, ".")
from ark_runtime import models
from ark_runtime.runtime import Runtime
from bench.loop import _inputs
for name in sys.argv[1].split(","):
    m = models.named(name)
    inputs = _inputs(torch, m)
    launches = []
    for launch in range(2):
        with Runtime(m, bind=inputs) as rt:
            cta = {}
            for s, stream in enumerate(rt.plan.streams):
                for ins in stream:
                    if ins["op"] == "run":
                        cta[ins["tile"]] = s
            ops = {}
            for t in rt.plan.tiles:
                ops.setdefault(t["op"], []).append(t["id"])
            rt.run(3); rt.wait()
            runs = []
            for r in range(4):
                rt.run(17); rt.wait(timeout=60)
                ns = rt._arrays["tile_ns"].get().astype(np.int64)
                per = {}
                for op, ids in ops.items():
                    d = np.full(len(rt.plan.streams), np.nan)
                    st = np.full(len(rt.plan.streams), np.nan)
                    for t in ids:
                        d[cta[t]] = (ns[2 * t + 1] - ns[2 * t]) / 1e3
                        st[cta[t]] = ns[2 * t]
                    per[op] = (d, st)
                runs.append(per)
                g = np.diff(rt.iteration_ns()) / 1e3
            launches.append(runs)
            print(name, "launch", launch, "iter med", np.median(g))
    def c(a, b):
        ok = ~np.isnan(a) & ~np.isnan(b)
        return np.corrcoef(a[ok], b[ok])[0, 1]
    for L, runs in enumerate(launches):
        d0 = [r[0][0] for r in runs]; d1 = [r[1][0] for r in runs]
        print(f" L{L} op0 mean {np.nanmean(d0[0]):.2f} sd {np.nanstd(d0[0]):.2f} max {np.nanmax(d0[0]):.2f} | op1 mean {np.nanmean(d1[0]):.2f} sd {np.nanstd(d1[0]):.2f} max {np.nanmax(d1[0]):.2f}")
        print(f"   corr op0 run0-run1 {c(d0[0], d0[1]):.2f} run0-run3 {c(d0[0], d0[3]):.2f} | op1 run0-run1 {c(d1[0], d1[1]):.2f} | op0-op1 same run {c(d0[0], d1[0]):.2f}")
        s0 = runs[0][0][1]; print(f"   op0 start spread {(np.nanmax(s0)-np.nanmin(s0))/1e3:.2f} us; end spread {(np.nanmax(s0 + d0[0]*1e3)-np.nanmin(s0 + d0[0]*1e3))/1e3:.2f}")
        slow = np.argsort(np.nan_to_num(d0[0], nan=0))[-8:]
        print("   slowest CTAs op0", slow.tolist(), "op1 of those", np.round(d1[0][slow], 2).tolist())
    print(f" across launches op0 corr {c(launches[0][0][0][0], launches[1][0][0][0]):.2f}")
