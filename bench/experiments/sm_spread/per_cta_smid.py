"""Per-CTA tile times of mlp-b64's matmuls beside the SM each CTA ran on."""
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
        acc = None
        for r in range(4):
            rt.run(17); rt.wait(timeout=60)
            ns = rt._arrays["tile_ns"].get().astype(np.int64)
            d = (ns[1::2] - ns[0::2]) / 1e3
            acc = d if acc is None else acc + d
        d = acc / 4
        prof = rt.profile()
        smid = [s.smid for s in prof.sms]
        per = {}
        for cta, stream in enumerate(rt.plan.streams):
            for ins in stream:
                if ins["op"] == "run":
                    t = rt.plan.tiles[ins["tile"]]
                    per.setdefault(cta, {})[t["op"]] = d[ins["tile"]]
        print(name)
        rows = sorted((smid[c], c, per.get(c, {}).get(0, float("nan")), per.get(c, {}).get(1, float("nan"))) for c in range(len(smid)))
        for sm, c, a, b in rows:
            print(f"  smid {sm:3d} cta {c:3d} op0 {a:6.2f} op1 {b:6.2f}")
