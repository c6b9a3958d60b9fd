"""BERT-Large layers imported from HF at batch 8 x 128: the up projection's tile time with HF's values against random."""
import json, sys
sys.path.insert(0, ".")
import numpy as np, torch
from bench import model_shapes as ms
import ark_runtime
from ark_runtime.kernel.codes import RING
from ark_runtime.runtime import Runtime

shape = ms.BertShape("bert-large", hidden=1024, layers=4, heads=16, intermediate=4096)
mod = ms.bert(torch, shape, device="cuda", dtype=torch.bfloat16)
ids = ms.token_ids(torch, shape.vocab, 8, 128, device="cuda")
imp = ark_runtime.from_torch(mod, (ids,), {})
base = imp.bind(ids)
g = torch.Generator(device="cuda").manual_seed(0)

def randomized(which):
    out = {}
    for k, t in base.items():
        if t.is_floating_point() and which(k, t):
            s = 1 / np.sqrt(t.shape[0]) if t.dim() == 2 and "weight" in k else 1.0
            out[k] = (torch.randn(t.shape, generator=g, device="cuda") * s).to(t.dtype)
        else:
            out[k] = t
    return out

res = []
for name, bind in (("hf", base), ("random all", randomized(lambda k, t: True)),
                   ("random biases", randomized(lambda k, t: "bias" in k)),
                   ("random up weight", randomized(lambda k, t: "intermediate_dense_weight" in k)),
                   ("hf", base)):
    with Runtime(imp.model, bind=bind) as rt:
        rt.run(2); rt.wait(); rt.run(RING + 1); rt.wait(timeout=60)
        gaps = np.diff(rt.iteration_ns()) / 1e3
        p = rt.profile().as_json()
        try:
            h = rt.get("gelu_erf17")
        except Exception as e:
            print("get:", e); h = np.zeros(1)
    ups = [o["mean_tile_us"] for o in p["ops"] if "gelu_erf" in o["what"]]
    downs = [o["mean_tile_us"] for o in p["ops"] if o["what"] == "matmul +add+add"]
    hh = np.asarray(h, dtype=np.float32)
    print(f"{name:18s} iter {np.median(gaps):7.1f} us  up tiles {np.round(ups,1)}  down {np.round(downs,1)}  "
          f"gelu out |mean| {np.abs(hh).mean():.3g} zeros {np.mean(hh==0):.3f}", flush=True)
    res.append(dict(name=name, iter_us=float(np.median(gaps)), ups=ups, downs=downs))
json.dump(res, open(sys.argv[1], "w"), indent=1)
