import sys
import numpy as np, torch
sys.path.insert(0, ".")
from ark_runtime import models
from ark_runtime.runtime import Runtime
from bench.loop import _inputs
for name in sys.argv[1].split(","):
    m = models.named(name); inputs = _inputs(torch, m)
    with Runtime(m, bind=inputs, sm_rates=(1.0,) * 132) as rt:
        rt.run(3); rt.wait()
        meds = []
        for _ in range(3):
            rt.run(65); rt.wait(timeout=60); meds.append(float(np.median(np.diff(rt.iteration_ns()) / 1e3)))
        ns = rt._arrays["tile_ns"].get().reshape(-1, 2).astype(np.int64); d = (ns[:, 1] - ns[:, 0]) / 1e3
        pins = [t for t in rt.plan.tiles if t["sm"] >= 0]
        ws = sorted({t["writes"][4] - t["writes"][3] for t in pins})
        print(f"p5-pinned64 {name} med {meds} widths {ws} tile min {d[[t['id'] for t in pins]].min():.2f} max {d[[t['id'] for t in pins]].max():.2f}", flush=True)
