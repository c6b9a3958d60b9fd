"""A/B: python3 ab.py LABEL MODEL[,MODEL...] -- run from a tree root; prints median gap and tile mean per model."""
import sys, time, statistics, json
import numpy as np, torch
sys.path.insert(0, ".")
from ark_runtime import models
from ark_runtime.runtime import LoopError, Runtime
from bench.loop import _inputs
label, names = sys.argv[1], sys.argv[2].split(",")
out = {}
for name in names:
    m = models.named(name)
    kw = dict(sms=2, placement="round-robin", fuse_chains=False) if name.startswith("tasks") else {}
    if name.startswith("copy"):
        kw = dict(copy_path="sm")
    inputs = _inputs(torch, m)
    meds = []
    tiles = []
    with Runtime(m, bind=inputs, **kw) as rt:
        rt.run(3); rt.wait()
        for _ in range(3):
            rt.run(65); rt.wait(timeout=60)
            g = np.diff(rt.iteration_ns()) / 1e3
            meds.append(float(np.median(g)))
        try:  # a tree whose kernel takes no tile stamps has no profile: its tile means are left out
            tiles = [o.mean_tile_us for o in rt.profile().ops]
        except LoopError:
            tiles = []
        if name.startswith("copy"):
            tiles = [r.time_us for r in rt.report()]
    scale = 999 if name.startswith("tasks") else 1
    out[name] = meds
    print(f"{label:10s} {name:12s} med {' '.join(f'{v/scale:.3f}' for v in meds)}  tile {' '.join(f'{t:.3f}' for t in tiles[:3])}", flush=True)
