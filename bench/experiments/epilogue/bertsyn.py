"""BERT-Large-shaped layers written with Model (2-D [1024, H] and 3-D [8, 128, H]): the up projection's tile time."""
import json, sys
sys.path.insert(0, ".")
import cupy, numpy as np
from ark_runtime.host_values import to_bits
from ark_runtime.kernel.codes import RING
from ark_runtime.model import Model
from ark_runtime.runtime import Runtime

def build(lead, layers=4, hidden=1024, heads=16, inner=4096, dtype="bf16", with_ln=True, with_attn=True):
    m = Model("b")
    x = m.input("x", (*lead, hidden), dtype)
    for i in range(layers):
        def p(name, shape, i=i):
            return m.input(f"l{i}_{name}", shape, dtype)
        if with_attn:
            q, k, v = (m.add(m.matmul(x, p(f"w{n}", (hidden, hidden))), p(f"b{n}", (hidden,))) for n in "qkv")
            o = m.add(m.matmul(m.attention(q, k, v, heads=heads, causal=False), p("wo", (hidden, hidden))), p("bo", (hidden,)))
            x = m.add(x, o)
            if with_ln:
                x = m.layernorm(x, p("ln1_w", (hidden,)), p("ln1_b", (hidden,)))
        h = m.unary("gelu_erf", m.add(m.matmul(x, p("w1", (hidden, inner))), p("b1", (inner,))))
        f = m.add(m.matmul(h, p("w2", (inner, hidden))), p("b2", (hidden,)))
        x = m.add(x, f)
        if with_ln:
            x = m.layernorm(x, p("ln2_w", (hidden,)), p("ln2_b", (hidden,)))
    m.output(x)
    return m

rng = np.random.default_rng(0)
res = []
for name, kw in (("2d", dict(lead=(1024,))), ("3d", dict(lead=(8, 128))), ("2d no ln", dict(lead=(1024,), with_ln=False)),
                 ("2d no attn", dict(lead=(1024,), with_attn=False)), ("2d", dict(lead=(1024,)))):
    mdl = build(**kw)
    bind = {}
    for t in mdl.tensors:
        if t.producer is None:
            s = 1 / np.sqrt(t.shape[0]) if t.name.startswith("l") and "_w" in t.name and len(t.shape) == 2 else 1.0
            bind[t.name] = cupy.asarray(to_bits(t, rng.standard_normal(t.shape) * s))
    with Runtime(mdl, bind=bind) as rt:
        rt.run(2); rt.wait(); rt.run(RING + 1); rt.wait(timeout=60)
        gaps = np.diff(rt.iteration_ns()) / 1e3
        p = rt.profile().as_json()
    ups = [round(o["mean_tile_us"], 1) for o in p["ops"] if "gelu_erf" in o["what"]]
    print(f"{name:10s} iter {np.median(gaps):7.1f} us  up tiles {ups}  ops " +
          ", ".join(f"{o['what']}:{o['mean_tile_us']:.1f}" for o in p["ops"][:9]), flush=True)
    res.append(dict(name=name, iter_us=float(np.median(gaps)), ops=p["ops"]))
json.dump(res, open(sys.argv[1], "w"), indent=1)
