"""Per-tile durations by tile index: periodic in the column offset (a memory-layout property) or not?"""
import sys
import numpy as np, torch
sys.path.insert(0, ".")
from ark_runtime import models
from ark_runtime.runtime import Runtime
from bench.loop import _inputs
np.set_printoptions(linewidth=200, precision=1, suppress=True)
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
        for op in sorted({t["op"] for t in rt.plan.tiles}):
            tiles = [t for t in rt.plan.tiles if t["op"] == op]
            w = [tuple(t["writes"]) for t in tiles]
            dd = np.array([d[t["id"]] for t in tiles])
            print(name, "op", op, len(tiles), "first writes", w[:3], "mean", dd.mean().round(2))
            print(dd)
            for k in (2, 4, 8, 16):
                if len(dd) % k == 0:
                    print(f"  by index mod {k}:", dd.reshape(-1, k).mean(axis=0))
