"""Critical path of the last iteration of a back-to-back run: for each tile, what it waited for."""
import sys, time
import numpy as np, torch
sys.path.insert(0, ".")
from ark_runtime import models
from ark_runtime.runtime import Runtime
from bench.loop import _inputs

kw = dict(a.split("=") for a in sys.argv[2:])
kw = {k: (v == "1") for k, v in kw.items()}
for name in sys.argv[1].split(","):
    m = models.named(name)
    inputs = _inputs(torch, m)
    print(f"start {name}", flush=True); t = time.perf_counter()
    with Runtime(m, bind=inputs, **kw) as rt:
        print(f"  launched after {time.perf_counter() - t:.1f} s", flush=True)
        rt.run(5); rt.wait(timeout=60)
        print("  warm", flush=True)
        for rep in range(3):
            rt.run(40); rt.wait(timeout=60); per = float(np.median(np.diff(rt.iteration_ns()))) / 1e3
            ns = rt._arrays["tile_ns"].get().reshape(-1, 2).astype(np.int64)
            sm = np.array(rt.plan.estimate["sm"]); ops = np.array([t["op"] for t in rt.plan.tiles])
            deps = rt.plan.deps
            t0 = ns[:, 0].min()
            st, en = (ns[:, 0] - t0) / 1e3, (ns[:, 1] - t0) / 1e3
            print(f"== {name} rep{rep}: {per:.1f} us/iteration (median gap, GPU clock); last iteration span {en.max():.2f}")
            for op in sorted(set(ops.tolist())):
                sel = ops == op
                d = en[sel] - st[sel]
                print(f"  op{op}: tiles {sel.sum()} start {st[sel].min():.2f}..{st[sel].max():.2f} end {en[sel].min():.2f}..{en[sel].max():.2f} dur p50 {np.median(d):.2f} max {d.max():.2f}")
            # per tile: previous tile on its SM
            prev = {}
            order = np.argsort(st)
            last_on = {}
            for i in order:
                prev[i] = last_on.get(sm[i]); last_on[sm[i]] = i
            gaps = []
            for i in range(len(st)):
                dr = max((en[p] for p in deps[i]), default=-1e9)
                pr = en[prev[i]] if prev[i] is not None else -1e9
                gaps.append((st[i] - max(dr, pr), "dep" if dr >= pr else "sm"))
            for op in sorted(set(ops.tolist())):
                sel = np.nonzero(ops == op)[0]
                g = np.array([gaps[i][0] for i in sel if gaps[i][0] > -1e8])
                kinds = [gaps[i][1] for i in sel]
                if len(g):
                    print(f"  op{op} start - ready: p50 {np.median(g):.2f} max {g.max():.2f}; bound by dep {kinds.count('dep')} sm {kinds.count('sm')}")
            # walk back from the last-ending tile
            i = int(np.argmax(en)); chain = []
            while True:
                dr = max(((en[p], p) for p in deps[i]), default=(-1e9, None))
                pr = (en[prev[i]], prev[i]) if prev[i] is not None else (-1e9, None)
                chain.append(f"op{ops[i]}@sm{sm[i]} [{st[i]:.2f},{en[i]:.2f}]")
                nxt = dr if dr[0] >= pr[0] else pr
                if nxt[1] is None: break
                chain.append(f"gap {st[i] - nxt[0]:.2f} ({'dep' if nxt is dr else 'sm'})")
                i = nxt[1]
            print("  chain (last first): " + " <- ".join(chain))
