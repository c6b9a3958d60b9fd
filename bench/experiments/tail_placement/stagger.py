"""mlp-b8 / mlp-b64 back to back: when does each op0 tile start, relative to the iteration's first op0 tile?"""
import sys
import numpy as np, torch
sys.path.insert(0, ".")
from ark_runtime import models
from ark_runtime.runtime import Runtime
from bench.loop import _inputs
for name in sys.argv[1].split(","):
    m = models.named(name)
    inputs = _inputs(torch, m)
    with Runtime(m, bind=inputs) as rt:
        rt.run(3); rt.wait()
        for rep in range(2):
            rt.run(40); rt.wait(timeout=60)
            ns = rt._arrays["tile_ns"].get().reshape(-1, 2).astype(np.int64)
            sm = np.array(rt.plan.estimate["sm"]); ops = np.array([t["op"] for t in rt.plan.tiles])
            kinds = [o.kind for o in rt.model.ops]
            t0 = ns[ops == 0, 0].min()
            for op in sorted(set(ops.tolist())):
                sel = np.nonzero(ops == op)[0]
                st = (ns[sel, 0] - t0) / 1e3; en = (ns[sel, 1] - t0) / 1e3
                order = np.argsort(st)
                late = [(int(sm[sel[i]]), round(float(st[i]), 2)) for i in order[-6:]]
                print(f"{name} rep{rep} op{op} {kinds[op]}: start {st.min():.2f}..{st.max():.2f} (p50 {np.median(st):.2f}) end {en.min():.2f}..{en.max():.2f}; latest starts (sm, us) {late}", flush=True)
            # which SMs run split_sum tiles
            print(f"  split_sum SMs {sorted(set(sm[ops == max(ops)].tolist()))}", flush=True)
