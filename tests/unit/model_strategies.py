"""Random models for Hypothesis: chains of every op kind on small shapes, mixing broadcasts and reuse, in one
float dtype (fp32 unless asked). Every tensor the chain goes on with has the first input's shape and dtype; ops that
change either come back to it (a cast and its way back, argmax's or a sampled index as a factor, a transpose
transposed again, a row sliced in two and joined again), and casts, argmax and sample read the input, whose values
every implementation holds alike, so they round and pick alike."""

from __future__ import annotations

from hypothesis import strategies as st

from ark_runtime.model import FLOAT_DTYPES, Model


@st.composite
def models(draw, dtype: str = "fp32"):
    m = Model("random")
    rows, cols = draw(st.integers(1, 40)), draw(st.sampled_from([8, 16, 24, 64]))
    pool = [m.input("x0", (rows, cols), dtype)]
    weight = m.input("w", (cols, cols), dtype)
    gamma, beta = m.input("g", (cols,), dtype), m.input("b", (cols,), dtype)
    cos, sin = m.input("cos", (rows, cols // 2), dtype), m.input("sin", (rows, cols // 2), dtype)
    table, ids = m.input("table", (11, cols), dtype), m.input("ids", (rows,), "int32")
    cos_h, sin_h = m.input("cos_h", (rows, cols // 4), dtype), m.input("sin_h", (rows, cols // 4), dtype)  # two heads
    for _ in range(draw(st.integers(1, 8))):
        a = draw(st.sampled_from(pool))
        kind = draw(st.sampled_from(["unary", "binary", "bcast", "matmul", "softmax", "rmsnorm", "reduce",
                                     "attention", "layernorm", "rope", "embedding", "copy", "rope_heads", "cast",
                                     "argmax", "transpose", "slice_concat", "sample"]))
        if kind == "unary":
            out = m.unary(draw(st.sampled_from(["gelu", "neg", "exp"])), a)
        elif kind == "binary":
            out = m.add(a, draw(st.sampled_from(pool)))
        elif kind == "bcast":
            out = m.mul(a, m.reduce("sum", a))
        elif kind == "matmul":
            out = m.matmul(a, weight)
        elif kind == "softmax":
            out = m.softmax(a)
        elif kind == "rmsnorm":
            out = m.rmsnorm(a, gamma)
        elif kind == "layernorm":
            out = m.layernorm(a, gamma, beta)
        elif kind == "rope":
            out = m.rope(a, cos, sin)
        elif kind == "embedding":
            out = m.add(m.embedding(table, ids), a)
        elif kind == "copy":
            out = m.copy(a, "host")
        elif kind == "rope_heads":
            out = m.rope(a, cos_h, sin_h, style=draw(st.sampled_from(["half", "interleaved"])), head_dim=cols // 2)
        elif kind == "cast":
            out = m.cast(m.cast(pool[0], draw(st.sampled_from([d for d in FLOAT_DTYPES if d != dtype]))), dtype)
        elif kind == "argmax":
            out = m.mul(a, m.cast(m.argmax(pool[0]), dtype))
        elif kind == "sample":  # the ids as the step: one per row
            drawn = m.sample(pool[0], ids, seed=draw(st.integers(0, (1 << 64) - 1)),
                             temperature=draw(st.sampled_from([0.0, 0.5, 1.0])), top_k=draw(st.integers(0, cols)),
                             top_p=draw(st.sampled_from([1.0, 0.9, 0.3])))
            out = m.mul(a, m.cast(drawn, dtype))
        elif kind == "transpose":
            out = m.transpose(m.transpose(a))
        elif kind == "slice_concat":
            k = draw(st.integers(1, cols - 1))
            out = m.concat(m.slice(a, 0, k), m.slice(draw(st.sampled_from(pool)), k, cols))
        elif kind == "reduce":
            m.reduce("max", a)
            continue
        else:
            out = m.attention(a, draw(st.sampled_from(pool)), a, heads=draw(st.sampled_from([1, 2, 8])),
                              causal=draw(st.booleans()))
        pool.append(out)
    m.output(pool[-1] if pool[-1].producer is not None else m.tensors[-1])  # an output is computed by an op
    return m
