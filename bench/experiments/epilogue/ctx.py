"""Up/down projections in a stack: own weights per layer (streamed from HBM) against one shared set (L2), epilogues."""
import json, sys
sys.path.insert(0, ".")
import cupy, numpy as np
from ark_runtime.host_values import to_bits
from ark_runtime.kernel.codes import RING
from ark_runtime.model import Model
from ark_runtime.runtime import Runtime

def model(M, H, I, layers, shared, epi):
    m = Model("ctx")
    x = m.input("x", (M, H), "bf16")
    ws = {}
    for i in range(layers):
        j = 0 if shared else i
        if j not in ws:
            ws[j] = (m.input(f"w1_{j}", (H, I), "bf16"), m.input(f"b1_{j}", (I,), "bf16"),
                     m.input(f"w2_{j}", (I, H), "bf16"), m.input(f"b2_{j}", (H,), "bf16"))
        w1, b1, w2, b2 = ws[j]
        h = m.matmul(x, w1)
        if "add" in epi: h = m.add(h, b1)
        if "erf" in epi: h = m.unary("gelu_erf", h)
        if "tanh" in epi: h = m.gelu(h)
        x = m.add(x, m.add(m.matmul(h, w2), b2))
    m.output(x)
    return m

rng = np.random.default_rng(0)
out = []
for M in (1024, 512):
  for layers, shared in ((8, True), (8, False)):
    for epi in ("none", "add_erf", "add_tanh"):
        mdl = model(M, 1024, 4096, layers, shared, epi)
        bind = {}
        for t in mdl.tensors:
            if t.producer is None:
                v = rng.standard_normal(t.shape) / (np.sqrt(t.shape[0]) if t.name.startswith("w") else 1)
                bind[t.name] = cupy.asarray(to_bits(t, v))
        with Runtime(mdl, bind=bind) as rt:
            rt.run(2); rt.wait(); rt.run(RING + 1); rt.wait(timeout=60)
            g = np.diff(rt.iteration_ns()) / 1e3
            p = rt.profile().as_json()
        ups = [o for o in p["ops"] if "matmul" in o["what"] and o["output"].startswith(("matmul", "add", "gelu", "unary")) ]
        line = f"M={M} layers={layers} shared={shared} epi={epi}: iter {np.median(g):.1f} us; " + \
            "; ".join(f"{o['what']}:{o['tiles']}t {o['mean_tile_us']:.1f}" for o in p["ops"][:4])
        print(line, flush=True)
        out.append(dict(M=M, layers=layers, shared=shared, epi=epi, iter_us=float(np.median(g)), ops=p["ops"]))
json.dump(out, open(sys.argv[1], "w"), indent=1)
