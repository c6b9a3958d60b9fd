"""A Hugging Face causal language model (LlamaForCausalLM, Qwen2ForCausalLM: RMSNorm, rotary embedding in the
rotate-half convention, grouped-query attention, a SwiGLU MLP, q/k/v biases where the model has them, tied or
separate output weights) as loop-kernel models that keep its key/value caches as states:

- `prefill`: the prompt's P tokens at once; each layer writes its keys and values into the caches' rows [0, P);
  the logits of every position.
- `decode`: one token a step for each of `batch` sequences, never leaving the GPU: the tokens and the positions
  are states, one per sequence; each layer appends each sequence's key and value at its position in its own block
  of the caches and attends over that block's first `length` rows (a state counted on each step: no new plan or
  compile as the caches grow; sequences may stand at different positions); the next tokens are the logits'
  argmax, or with `sampling` a draw of the sample op (top-k / top-p with a seed, on the GPU; the position state is
  its step, so sequence b's token at position p + 1 is drawn from (seed, p, b)), written back into the token state
  and into a ring of tokens in pinned host memory (`batch` rows of one token a step, sequence by sequence) with its
  count (`Runtime.stream` yields the rows).

The caches are [batch, capacity, kv_heads * D] (the prefill's batch is 1: one prompt at a time into one block,
bound to that sequence's slice of the decode caches).

Weights are read from the module once, as matmul's [K, N] operands (a transposed copy of each Linear's [N, K]
weight; the tied output weight likewise), in the module's dtype; `DecodeModel.weights` maps each model input to its
array. The float64 reference of either model matches the module's own forward (tests/unit/test_hf_decode.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ark_runtime.graph import ModelError
from ark_runtime.model import Model

DTYPES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}
SUPPORTED = ("LlamaForCausalLM", "Qwen2ForCausalLM")


@dataclass
class DecodeModel:
    model: Model
    weights: dict[str, object] = field(default_factory=dict)  # model input name -> torch tensor (contiguous)
    capacity: int = 0  # rows of each key/value cache: the prompt and every token generated
    ring: int = 0  # steps of tokens the host ring holds (decode only)
    batch: int = 1  # sequences a decode step advances
    logits: str = ""  # the output's name


def _config(module):
    name = type(module).__name__
    if name not in SUPPORTED:
        raise ModelError(f"{name} is not one of {', '.join(SUPPORTED)}: the decode builder maps only those")
    c = module.config
    heads, kv_heads = c.num_attention_heads, getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    d = getattr(c, "head_dim", None) or c.hidden_size // heads
    return c, heads, kv_heads, d


def _dtype(module) -> str:
    dt = str(next(module.parameters()).dtype)
    if dt not in DTYPES:
        raise ModelError(f"the module's parameters are {dt}; the builder takes float32, bfloat16 or float16")
    return DTYPES[dt]


def rope_tables(module, capacity: int):
    """cos and sin [capacity, D/2] of positions 0 .. capacity - 1, from the module's own rotary embedding (its
    scaling included), in the module's dtype."""
    import torch

    rotary = module.model.rotary_emb
    pos = torch.arange(capacity, device=next(module.parameters()).device)[None]
    probe = torch.zeros(1, capacity, 1, dtype=next(module.parameters()).dtype, device=pos.device)
    with torch.no_grad():
        cos, sin = rotary(probe, pos)
    half = cos.shape[-1] // 2
    return cos[0, :, :half].contiguous(), sin[0, :, :half].contiguous()


SAMPLING_KEYS = ("temperature", "top_k", "top_p", "seed")


def sampling_args(sampling) -> dict | None:
    """`sampling` as the sample op's keyword arguments (None: greedy), or ModelError saying what it must be; the
    values are checked by the op (ops/sample.py) when the model is built."""
    if sampling is None:
        return None
    if not isinstance(sampling, dict) or "seed" not in sampling or set(sampling) - set(SAMPLING_KEYS):
        raise ModelError(f"sampling={sampling!r}: give None (greedy) or a dict of seed and any of temperature, "
                         "top_k, top_p, e.g. dict(temperature=0.8, top_k=50, top_p=0.95, seed=0)")
    return dict(sampling)


def build(module, capacity: int, prompt: int | None = None, ring: int = 0, batch: int = 1,
          sampling: dict | None = None) -> DecodeModel:
    """The prefill model of a `prompt`-token prompt (`prompt` given), else the decode step of `batch` sequences
    (`ring`: the steps of tokens kept on the host; `sampling`: None for the argmax, or dict(temperature, top_k,
    top_p, seed) for the sample op's draw, seed required)."""
    c, heads, kv_heads, d = _config(module)
    dt = _dtype(module)
    if not isinstance(capacity, int) or capacity < 1 or capacity > getattr(c, "max_position_embeddings", capacity):
        raise ModelError(f"capacity={capacity!r}: give the rows of the caches, 1 to the model's "
                         f"{getattr(c, 'max_position_embeddings', '?')} positions")
    if prompt is not None and (not isinstance(prompt, int) or not 1 <= prompt <= capacity):
        raise ModelError(f"prompt={prompt!r}: a prompt of 1 to capacity ({capacity}) tokens")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1 or (prompt is not None and batch != 1):
        raise ModelError(f"batch={batch!r}: a decode step takes 1 or more sequences; a prefill takes one prompt (run "
                         "one per sequence into its block of the caches)")
    draw = sampling_args(sampling)
    if draw is not None and prompt is not None:
        raise ModelError("sampling goes with a decode step (prompt=None); a prefill gives logits, not tokens")
    s = prompt or 1
    decode = prompt is None
    m = Model(f"{type(module).__name__}-{f'decode{batch}' if decode else f'prefill{s}'}")
    out = DecodeModel(m, capacity=capacity, ring=ring, batch=batch)
    w = out.weights

    def weight(name: str, tensor, transpose: bool = False):
        t = tensor.detach()
        t = (t.t() if transpose else t).contiguous()
        w[name] = t
        return m.input(name, tuple(t.shape), dt)

    p = module.model
    cos_t, sin_t = rope_tables(module, capacity)
    embed = weight("embed", p.embed_tokens.weight)
    if decode:
        tok = m.state("token", (batch, 1), "int32")
        pos = m.state("position", (batch,), "int32")
        length = m.state("length", (batch,), "int32")
        keys = m.count(length)
        x = m.embedding(embed, tok)  # [batch, 1, hidden]: each sequence's one query row
        rows = m.input("rope_cos_all", (capacity, d // 2), dt), m.input("rope_sin_all", (capacity, d // 2), dt)
        w["rope_cos_all"], w["rope_sin_all"] = cos_t, sin_t
        cos, sin = m.embedding(rows[0], pos), m.embedding(rows[1], pos)  # a row of angles per sequence
    else:
        ids = m.input("ids", (s,), "int32")
        x = m.embedding(embed, ids)
        cos, sin = weight("rope_cos", cos_t[:s]), weight("rope_sin", sin_t[:s])
    eps = float(c.rms_norm_eps)
    for i, layer in enumerate(p.layers):
        at = layer.self_attn

        def proj(h, lin, name):
            y = m.matmul(h, weight(f"l{i}_{name}", lin.weight, transpose=True))
            if getattr(lin, "bias", None) is not None:
                y = m.add(y, weight(f"l{i}_{name}_bias", lin.bias))
            return y

        h = m.rmsnorm(x, weight(f"l{i}_norm1", layer.input_layernorm.weight), eps)
        q, k, v = proj(h, at.q_proj, "q"), proj(h, at.k_proj, "k"), proj(h, at.v_proj, "v")
        q = m.rope(q, cos, sin, style="half", head_dim=d)
        k = m.rope(k, cos, sin, style="half", head_dim=d)
        ck = m.state(f"l{i}_cache_k", (batch, capacity, kv_heads * d), dt)
        cv = m.state(f"l{i}_cache_v", (batch, capacity, kv_heads * d), dt)
        if decode:
            ck, cv = m.write(ck, k, pos, stride=capacity), m.write(cv, v, pos, stride=capacity)
            a = m.op("attention", q, ck, cv, keys, heads=heads, kv_heads=kv_heads, causal=True)
        else:
            m.write(ck, k, 0)
            m.write(cv, v, 0)
            a = m.attention(q, k, v, heads=heads, kv_heads=kv_heads, causal=True)
        x = m.add(x, proj(a, at.o_proj, "o"))
        h2 = m.rmsnorm(x, weight(f"l{i}_norm2", layer.post_attention_layernorm.weight), eps)
        mlp = layer.mlp
        gate, up = proj(h2, mlp.gate_proj, "gate"), proj(h2, mlp.up_proj, "up")
        x = m.add(x, proj(m.mul(m.silu(gate), up), mlp.down_proj, "down"))
    x = m.rmsnorm(x, weight("final_norm", p.norm.weight), eps)
    logits = m.matmul(x, weight("lm_head", module.lm_head.weight, transpose=True))
    out.logits = logits.name
    if decode:
        nxt = m.argmax(logits) if draw is None else m.sample(logits, pos, **draw)  # [batch, 1, 1]
        m.write(tok, nxt, 0)
        if ring:
            # each step's tokens as `batch` rows of one token, sequence by sequence; the count moves by the batch
            tokens = m.state("tokens", (ring * batch, 1), "int32", "host")
            produced = m.state("produced", (1,), "int32", "host")
            m.write(tokens, nxt, produced)
            m.count(produced, by=batch)
        m.count(pos)
    m.output(logits)
    return out


def caches_from(past_key_values, prompt: int, capacity: int, kv_heads: int, d: int) -> dict[str, np.ndarray]:
    """A Hugging Face cache (after a prefill of `prompt` tokens, batch B) as the decode model's cache states: rows
    [0, prompt) of each sequence's block of each layer's keys and values, [B, capacity, kv_heads * d] (the rest
    zeros)."""
    out = {}
    for i, layer in enumerate(past_key_values.layers):
        for name, t in (("k", layer.keys), ("v", layer.values)):  # [B, kv_heads, prompt, d]
            rows = t.transpose(1, 2).reshape(t.shape[0], prompt, kv_heads * d).double().cpu().numpy()
            full = np.zeros((t.shape[0], capacity, kv_heads * d))
            full[:, :prompt] = rows
            out[f"l{i}_cache_{name}"] = full
    return out
