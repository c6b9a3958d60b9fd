import sys
import numpy as np, torch, cupy
sys.path.insert(0, ".")
from ark_runtime import models
from ark_runtime.runtime import Runtime
from bench.loop import _inputs
m = models.named("tasks1000")
with Runtime(m, bind=_inputs(torch, m), sms=2, placement="round-robin", fuse_chains=False) as rt:
    rt.run(3); rt.wait()
    for rep in range(3):
        rt.run(65); rt.wait(timeout=60)
        med = float(np.median(np.diff(rt.iteration_ns()))) / 1e3 / 999
        ptr = rt._module.get_global("ark_trace")
        tr = cupy.ndarray((3, 4096), cupy.uint64, ptr).get().astype(np.int64)
        ns = rt._arrays["tile_ns"].get().reshape(-1, 2).astype(np.int64)
        k = np.arange(2, 999)
        d = {"signal -> detected": tr[0, k] - tr[2, k - 1], "detected -> past barrier": tr[1, k] - tr[0, k],
             "barrier -> tile start": ns[k, 0] - tr[1, k], "tile": ns[k, 1] - ns[k, 0],
             "tile end -> signal": tr[2, k] - ns[k, 1]}
        tot = sum(v.mean() for v in d.values())
        print(f"edge {med:.3f} us; " + "; ".join(f"{n} {v.mean()/1e3:.3f} (p10 {np.percentile(v,10)/1e3:.3f} p90 "
              f"{np.percentile(v,90)/1e3:.3f})" for n, v in d.items()) + f"; sum {tot/1e3:.3f}", flush=True)
