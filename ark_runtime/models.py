"""Named models: the cases `arkdma bench loop` measures, for `arkdma plan NAME` and the tests.

Each builder returns a Model; `named(name)` finds one (`chain64`, `mlp-b8`, `block-s128`, `matmul8192`, ...).
"""

from __future__ import annotations

from collections.abc import Callable

from ark_runtime.model import Model, ModelError

# neg on both sides of silu and gelu: the negative inputs keep their size through the chain (relu after neg, the
# earlier order, made every output 0 from the fifth op on, whatever the input)
CHAIN_FNS = ("neg", "silu", "gelu", "neg")


def chain(ops: int = 64, rows: int = 256, cols: int = 1024) -> Model:
    """`ops` elementwise ops chained on one fp32 tensor (1 MiB at the defaults)."""
    m = Model(f"chain{ops}")
    x = m.input("x", (rows, cols), "fp32")
    for i in range(ops):
        x = m.unary(CHAIN_FNS[i % len(CHAIN_FNS)], x)
    m.output(x)
    return m


def mlp(batch: int, hidden: int = 4096, inner: int = 16384, dtype: str = "bf16") -> Model:
    """hidden -> inner (GELU) -> hidden."""
    m = Model(f"mlp-b{batch}")
    x = m.input("x", (batch, hidden), dtype)
    w1, w2 = m.input("w1", (hidden, inner), dtype), m.input("w2", (inner, hidden), dtype)
    m.output(m.matmul(m.gelu(m.matmul(x, w1)), w2))
    return m


def transformer_block(seq: int, hidden: int = 1024, heads: int = 16, dtype: str = "bf16") -> Model:
    """A pre-LN block at batch 1: x + attention(LN(x)), then + MLP(LN(.)) with a 4x GELU MLP."""
    m = Model(f"block-s{seq}")
    x = m.input("x", (seq, hidden), dtype)
    p = {name: m.input(name, (hidden,), dtype) for name in ("ln1_w", "ln1_b", "ln2_w", "ln2_b")}
    w = {name: m.input(name, (hidden, hidden), dtype) for name in ("wq", "wk", "wv", "wo")}
    w1, w2 = m.input("w1", (hidden, 4 * hidden), dtype), m.input("w2", (4 * hidden, hidden), dtype)
    h = m.layernorm(x, p["ln1_w"], p["ln1_b"])
    q, k, v = (m.matmul(h, w[n]) for n in ("wq", "wk", "wv"))
    x2 = m.add(x, m.matmul(m.attention(q, k, v, heads=heads), w["wo"]))
    h2 = m.layernorm(x2, p["ln2_w"], p["ln2_b"])
    m.output(m.add(x2, m.matmul(m.gelu(m.matmul(h2, w1)), w2)))
    return m


def matmul(n: int = 8192, dtype: str = "bf16") -> Model:
    m = Model(f"matmul{n}")
    m.output(m.matmul(m.input("a", (n, n), dtype), m.input("b", (n, n), dtype)))
    return m


def copy_out(nbytes: int) -> Model:
    """A tensor computed, then copied to pinned host memory from inside the kernel."""
    m = Model(f"copy{nbytes}")
    x = m.input("x", (nbytes // 4,), "fp32")
    m.output(m.copy(m.unary("identity", x), "host"))
    return m


def dependent_tasks(tasks: int = 1000, cols: int = 256) -> Model:
    """`tasks` one-tile ops, each reading the one before (a chain of dependencies; placed round-robin on two
    SMs, every edge is a cross-SM wait)."""
    m = Model(f"tasks{tasks}")
    x = m.input("x", (1, cols), "fp32")
    for _ in range(tasks):
        x = m.unary("neg", x)
    m.output(x)
    return m


def bert_stack(layers: int = 24, seq: int = 128, hidden: int = 1024, heads: int = 16, inner: int = 4096,
               dtype: str = "bf16") -> Model:
    """`layers` post-LN encoder layers shaped like BERT-Large (biases on every projection, bidirectional attention,
    GELU MLP), at batch 1, every layer with its own weights."""
    m = Model(f"bert{layers}-s{seq}")
    x = m.input("x", (seq, hidden), dtype)
    for i in range(layers):
        def p(name, shape, i=i):
            return m.input(f"l{i}_{name}", shape, dtype)
        q, k, v = (m.add(m.matmul(x, p(f"w{n}", (hidden, hidden))), p(f"b{n}", (hidden,))) for n in "qkv")
        o = m.add(m.matmul(m.attention(q, k, v, heads=heads, causal=False), p("wo", (hidden, hidden))),
                  p("bo", (hidden,)))
        x = m.layernorm(m.add(x, o), p("ln1_w", (hidden,)), p("ln1_b", (hidden,)))
        h = m.gelu(m.add(m.matmul(x, p("w1", (hidden, inner))), p("b1", (inner,))))
        f = m.add(m.matmul(h, p("w2", (inner, hidden))), p("b2", (hidden,)))
        x = m.layernorm(m.add(x, f), p("ln2_w", (hidden,)), p("ln2_b", (hidden,)))
    m.output(x)
    return m


def llama_stack(layers: int = 16, seq: int = 128, hidden: int = 2048, heads: int = 32, inner: int = 8192,
                dtype: str = "bf16") -> Model:
    """`layers` pre-norm decoder layers shaped like Llama-3.2-1B (RMSNorm, RoPE, causal attention with as many KV
    heads as query heads, SwiGLU MLP), at batch 1, every layer with its own weights."""
    m = Model(f"llama{layers}-s{seq}")
    x = m.input("x", (seq, hidden), dtype)
    d = hidden // heads
    cos, sin = m.input("cos", (seq, hidden // 2), dtype), m.input("sin", (seq, hidden // 2), dtype)
    for i in range(layers):
        def p(name, shape, i=i):
            return m.input(f"l{i}_{name}", shape, dtype)
        h = m.rmsnorm(x, p("norm1", (hidden,)))
        q, k = (m.rope(m.matmul(h, p(f"w{n}", (hidden, hidden))), cos, sin) for n in "qk")
        v = m.matmul(h, p("wv", (hidden, hidden)))
        x = m.add(x, m.matmul(m.attention(q, k, v, heads=hidden // d), p("wo", (hidden, hidden))))
        h2 = m.rmsnorm(x, p("norm2", (hidden,)))
        gate, up = m.matmul(h2, p("wg", (hidden, inner))), m.matmul(h2, p("wu", (hidden, inner)))
        x = m.add(x, m.matmul(m.mul(m.silu(gate), up), p("wd", (inner, hidden))))
    m.output(x)
    return m


# Whole stacks of layers, for `arkdma plan` and `arkdma bench plan` (how planning and compiling scale)
STACKS: dict[str, Callable[[], Model]] = {"bert-large24": bert_stack, "llama16": llama_stack}

NAMED: dict[str, Callable[[], Model]] = {
    "chain64": chain,
    "mlp-b1": lambda: mlp(1), "mlp-b8": lambda: mlp(8), "mlp-b64": lambda: mlp(64),
    "block-s128": lambda: transformer_block(128), "block-s512": lambda: transformer_block(512),
    "matmul8192": matmul, "tasks1000": dependent_tasks,
    "copy8k": lambda: copy_out(8192), "copy1m": lambda: copy_out(1 << 20),
}


def named(name: str) -> Model:
    found = NAMED.get(name) or STACKS.get(name)
    if found is None:
        raise ModelError(f"no model named {name!r}; named models: {', '.join((*NAMED, *STACKS))}")
    return found()
