"""One up projection (x @ w1, optionally GELU) back to back: per-tile time and iteration, gemv vs gemv_mma."""
import sys
import numpy as np, torch
sys.path.insert(0, ".")
from ark_runtime.model import Model
from ark_runtime.runtime import Runtime
from bench.loop import _inputs

def up(b, gelu, inner=16384, hidden=4096):
    m = Model(f"up-b{b}{'-gelu' if gelu else ''}")
    x = m.input("x", (b, hidden), "bf16"); w1 = m.input("w1", (hidden, inner), "bf16")
    y = m.matmul(x, w1)
    m.output(m.gelu(y) if gelu else y)
    return m

for b in (1, 8):
    for gelu in (False, True):
        m = up(b, gelu)
        with Runtime(m, bind=_inputs(torch, m)) as rt:
            rt.run(5); rt.wait(timeout=60)
            for rep in range(3):
                rt.run(40); rt.wait(timeout=60)
                per = float(np.median(np.diff(rt.iteration_ns()))) / 1e3
                ns = rt._arrays["tile_ns"].get().reshape(-1, 2).astype(np.int64)
                d = (ns[:, 1] - ns[:, 0]) / 1e3
                st = (ns[:, 0] - ns[:, 0].min()) / 1e3
                print(f"{m.name} rep{rep}: {per:.2f} us/it; tiles {len(d)} dur p10 {np.percentile(d,10):.2f} p50 {np.median(d):.2f} max {d.max():.2f}; start spread {st.max():.2f}", flush=True)
