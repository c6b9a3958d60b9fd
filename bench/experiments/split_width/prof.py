import sys
import numpy as np, torch
sys.path.insert(0, ".")
from ark_runtime import models
from ark_runtime.runtime import Runtime
from bench.loop import _inputs
for name in sys.argv[2].split(","):
    m = models.named(name); inputs = _inputs(torch, m)
    with Runtime(m, bind=inputs) as rt:
        rt.run(3); rt.wait()
        spans = []
        for _ in range(9):
            rt.run(1); rt.wait()
            p = rt.profile()
            spans.append([(o.start_us, o.span_us, o.mean_tile_us, o.max_tile_us) for o in p.ops] + [(p.iteration_us,)*4])
        s = np.median(np.array(spans), axis=0)
        print(sys.argv[1], name, " | ".join(f"op{i} start {a:.1f} span {b:.1f} mean {c:.1f} max {d:.1f}" for i, (a, b, c, d) in enumerate(s[:-1])), f"| iter {s[-1][0]:.1f}", flush=True)
