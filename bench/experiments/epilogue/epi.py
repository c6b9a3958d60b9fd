"""Matmul tiles with and without epilogues, per block and loader (experiment)."""
import itertools, json, sys
sys.path.insert(0, ".")
import cupy, numpy as np
from ark_runtime.host_values import to_bits
from ark_runtime.kernel.codes import RING
from ark_runtime.model import Model
from ark_runtime.runtime import Runtime

def model(M, K, N, epi):
    m = Model(f"mm{M}x{N}x{K}")
    x = m.input("x", (M, K), "bf16"); w = m.input("w", (K, N), "bf16"); b = m.input("b", (N,), "bf16")
    y = m.matmul(x, w)
    if "add" in epi: y = m.add(y, b)
    if "erf" in epi: y = m.unary("gelu_erf", y)
    m.output(y)
    return m, y.name

rng = np.random.default_rng(0)
rows = []
for (M, N, K) in [(1024, 4096, 1024), (1024, 1024, 4096), (512, 4096, 1024)]:
    for epi in ("none", "add", "add_erf"):
        mdl, out = model(M, K, N, epi)
        vals = {"x": rng.standard_normal((M, K)), "w": rng.standard_normal((K, N)) / np.sqrt(K), "b": rng.standard_normal(N)}
        bind = {t.name: cupy.asarray(to_bits(t, vals[t.name])) for t in mdl.tensors if t.producer is None}
        for block, loader in itertools.product(((128, 256), (128, 128), (128, 64), (64, 256)), ("cp.async", "tma")):
            mdl, out = model(M, K, N, epi)
            try:
                with Runtime(mdl, bind=bind, split_k=False, knobs={out: {"block": block, "loader": loader}}) as rt:
                    rt.run(2); rt.wait(); rt.run(RING + 1); rt.wait(timeout=60)
                    g = np.diff(rt.iteration_ns()) / 1e3
                    ops = [o.kind for o in rt.model.ops]
                p10, p50, p90 = np.percentile(g, [10, 50, 90])
                rows.append(dict(M=M, N=N, K=K, epi=epi, block=block, loader=loader, us=p50, p10=p10, p90=p90, ops=ops))
                print(f"{M}x{N}x{K} {epi:8s} {block} {loader:8s} {p50:8.1f} ({p10:.1f}-{p90:.1f}) {ops}", flush=True)
            except Exception as e:
                print(f"{M}x{N}x{K} {epi} {block} {loader} ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)
json.dump(rows, open(sys.argv[1], "w"), indent=1)
