"""The graph path's copy (report time, median over 3 x 65 iterations' last report) with the loop kernel on all SMs
or on half of them: does a resident loop kernel slow the copy graph's nodes?"""
import sys, statistics
import numpy as np, torch
sys.path.insert(0, ".")
from ark_runtime import models
from ark_runtime.runtime import Runtime
from bench.loop import _inputs
for rnd in range(2):
    for name in ("copy1m", "copy8k"):
        for sms in (None, 66, 8):
            m = models.named(name)
            inputs = _inputs(torch, m)
            times, its = [], []
            with Runtime(m, bind=inputs, copy_path="graph", sms=sms) as rt:
                rt.run(3); rt.wait()
                for _ in range(5):
                    rt.run(65); rt.wait(timeout=60)
                    times.append(rt.report()[0].time_us)
                    its.append(float(np.median(np.diff(rt.iteration_ns()))) / 1e3)
            print(f"{name:7s} sms {sms or 132:3d}: copy {statistics.median(times):.2f} us ({min(times):.2f}-{max(times):.2f}), "
                  f"iteration {statistics.median(its):.2f}", flush=True)
