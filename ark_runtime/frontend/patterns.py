"""Patterns mapped to one op each, recognised by the tags values carry (values.py) rather than by the nodes' names:

  RMSNorm     w * (x.to(f32) * rsqrt(mean(x^2, -1, keepdim) + eps)).to(dtype)     -> m.rmsnorm(x, w, eps)
  rotary      x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])
                                                                                 -> m.rope(style="half", head_dim=D)
  attention   softmax(q @ k^T * scale + mask) @ v, and scaled_dot_product_attention -> m.attention(q, k, v, heads)

A pattern that does not hold falls back to the ops as written: rotate_half as a matmul by a signed permutation,
an RMSNorm without its weight as an RMSNorm with a weight of ones; scores and probabilities outside attention are
refused. (Imports torch: only from_torch imports this module.)"""

from __future__ import annotations

import math

import torch

from ark_runtime.frontend import elementwise, views
from ark_runtime.frontend.layouts import gather, heads, rowwise, targets_for
from ark_runtime.frontend.values import Act, Const, Lazy, Val, failing, force, strip_casts

MASKED = -1e4  # an additive mask entry at or below this blocks its key (exp underflows to 0 in fp32)


def number(v) -> float | None:
    """A Python number, or a constant holding one value."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, Const):
        if not v.is_tensor and isinstance(v.value, (int, float)):
            return float(v.value)
        if v.is_tensor and v.value.numel() == 1 and v.value.is_floating_point():
            return float(v.value.reshape(()))
    return None


# --- casts ----------------------------------------------------------------------------------------------------------
def cast(w, x: Val, dtype) -> Val:
    """x in `dtype`: the same value where it already is; a value a pattern will take whole keeps its tag; else a cast
    made when something needs it (m.cast, or "not supported yet" without it)."""
    if dtype == x.dtype or not isinstance(x, Val):
        return x
    if x.has("rms_normed"):
        return rms_normed(w, *x.tag[1:], dtype)
    if x.has("probs"):
        return Lazy(x.shape, dtype, w.origin, x.make, x.tag)
    if not dtype.is_floating_point and not x.dtype.is_floating_point:
        return x  # ids: the model holds every integer tensor as int32
    origin = w.origin

    def make():
        a = force(x)
        if not w.caps.cast:
            raise w.refuse_at(origin, f"a cast from {a.dtype} to {dtype} is not supported yet: this runtime's Model "
                              "has no cast op (Model.cast); keep the module in one dtype", supported="")
        t = w.rec.call("cast", a.tensor, w.float_dtype(dtype, "the cast's result"))
        return Act(t, a.view, dtype, origin, ("cast", x))
    return Lazy(x.shape, dtype, origin, make, ("cast", x))


# --- RMSNorm ----------------------------------------------------------------------------------------------------------
def rms_normed(w, root: Val, eps: float, dtype) -> Lazy:
    """x * rsqrt(mean(x^2) + eps) in `dtype`: an RMSNorm with a weight of ones if nothing scales it."""
    origin = w.origin

    def make():
        return _rmsnorm(w, root, None, eps, dtype, origin)
    return Lazy(root.shape, dtype, origin, make, ("rms_normed", root, eps))


def _rmsnorm(w, root: Val, weight: Const | None, eps: float, dtype, origin) -> Act:
    x = rowwise(w, root, "the RMSNorm's input")
    d = x.shape[-1]
    model_dtype = w.float_dtype(x.dtype, "the RMSNorm's input")
    if weight is None:
        wt = w.rec.constant(torch.ones(d), model_dtype, "rmsnorm_ones")
    else:
        wt = w.const_tensor(weight, model_dtype, shape=(d,))
    t = w.rec.call("rmsnorm", x.tensor, wt, eps=eps)
    out = Act(t, x.view, x.dtype, origin)
    return force(cast(w, out, dtype)) if dtype != x.dtype else out


def rms_mul(w, a: Val, b: Val, dtype) -> Val | None:
    """mul(x, rsqrt(mean(x^2) + eps)) -> the normalized x; mul(weight, normalized x) -> m.rmsnorm(x, weight)."""
    for p, q in ((a, b), (b, a)):
        if p.has("inv_rms") and isinstance(q, Val) and strip_casts(q) is p.tag[1]:
            return rms_normed(w, p.tag[1], p.tag[2], dtype)
        if p.has("rms_normed") and isinstance(q, Const) and q.is_tensor:
            root, eps = p.tag[1], p.tag[2]
            d = root.shape[-1] if root.shape else 0
            if q.value.numel() == d and q.shape and q.shape[-1] == d:
                return _rmsnorm(w, root, q, eps, dtype, w.origin)
    return None


# --- rotary embedding -------------------------------------------------------------------------------------------------
def rotate_half(w, parts: list, dim: int) -> Lazy | None:
    """cat([-x[..., h:], x[..., :h]], -1) for x whose last axis is 2h."""
    if len(parts) != 2 or not all(isinstance(p, Val) for p in parts):
        return None
    neg, first = parts
    if not (neg.has("neg") and neg.tag[1].has("slice") and first.has("slice")):
        return None
    second = neg.tag[1]
    x = first.tag[1]
    last = len(x.shape) - 1
    if dim != last or second.tag[1] is not x or x.shape[-1] % 2:
        return None
    h = x.shape[-1] // 2
    if first.tag[2:] != (last, 0, h) or second.tag[2:] != (last, h, 2 * h):
        return None
    origin = w.origin

    def make():
        xa = force(x)
        f = tuple(xa.tensor.shape)
        idx = xa.view.index(math.prod(f))
        src = torch.cat([idx[..., h:], idx[..., :h]], dim=-1)
        sign = torch.cat([-torch.ones(h), torch.ones(h)]).expand(src.shape)
        g = gather(w, xa, [(f, xa.view)] + targets_for(x.shape), index=src, sign=sign, what="rotate_half")
        if g is None:
            raise w.refuse_at(origin, f"rotate_half of {x.shape} laid out in model tensor {f} is no column "
                              "permutation of its rows")
        return Act(g.tensor, g.view, x.dtype, origin)
    return Lazy(x.shape, x.dtype, origin, make, ("rot_half", x))


def rope_add(w, a: Val, b: Val) -> Act | None:
    """x * cos + rotate_half(x) * sin -> m.rope(x, cos, sin, style="half", head_dim=D), where the model has it and
    cos/sin are the same for every head and batch, their halves equal (Hugging Face's cat(freqs, freqs))."""
    if not w.caps.rope_half:
        return None
    for p, q in ((a, b), (b, a)):
        if p.has("scaled") and q.has("scaled") and q.tag[1].has("rot_half") and q.tag[1].tag[1] is p.tag[1]:
            return _rope(w, p.tag[1], p.tag[2], q.tag[2])
    return None


def _rope(w, x: Val, cos: Const, sin: Const) -> Act | None:
    xa = force(x)
    f = tuple(xa.tensor.shape)
    d = x.shape[-1]
    h = d // 2
    if len(f) < 2 or f[-1] % d or not views.one_to_one(xa.view, f):
        return None
    idx = xa.view.index(math.prod(f))
    first = idx[..., :1]
    if not (torch.equal(idx, first + torch.arange(d)) and bool((first % d == 0).all())):
        return None  # each rotated group is not one head's D columns, in order
    tables = []
    for c in (cos, sin):
        laid = views.to_frame(c.value, x.shape, xa.view, f)
        if laid is None:
            return None
        per_head = laid.reshape(-1, f[-2], f[-1] // d, d)
        table = per_head[0, :, 0, :]
        if not (torch.equal(per_head, table[None, :, None, :].expand_as(per_head))
                and torch.equal(table[:, :h], table[:, h:])):
            return None
        tables.append(table[:, :h])
    model_dtype = w.float_dtype(x.dtype, "the rotary embedding's input")
    cos_t, sin_t = (w.rec.constant(t, model_dtype, w.base_name(c)) for t, c in zip(tables, (cos, sin)))
    t = w.rec.call("op", "rope", xa.tensor, cos_t, sin_t, style="half", head_dim=d)
    return Act(t, xa.view, x.dtype, w.origin)


# --- attention --------------------------------------------------------------------------------------------------------
SCORES_ONLY = ("attention scores (a matmul of two activations) are mapped only whole: softmax(q @ k^T * scale "
               "[+ mask]) [dropout] @ v, or scaled_dot_product_attention")


def scores(w, q: Val, kt: Val, dtype) -> Lazy:
    return Lazy(q.shape[:-1] + (kt.shape[-1],), dtype, w.origin, _refusing(w, SCORES_ONLY),
                ("scores", q, kt, 1.0, None))


def _refusing(w, what: str):
    origin = w.origin

    def make():
        raise w.refuse_at(origin, what)
    return make


def scores_scaled(w, s: Lazy, factor: float, dtype) -> Lazy:
    q, kt, scale, mask = s.tag[1:]
    mask = None if mask is None else mask * factor
    return Lazy(s.shape, dtype, w.origin, s.make, ("scores", q, kt, scale * factor, mask))


def scores_masked(w, s: Lazy, mask: Val, dtype) -> Lazy:
    q, kt, scale, old = s.tag[1:]
    if not (isinstance(mask, Const) and mask.is_tensor):
        return failing(s.shape, dtype, w.origin, w.refuse(
            "an attention mask computed from the inputs (a padding mask): the runtime's attention takes no mask, "
            "only causal or none; export without the attention_mask argument"))
    value = mask.value if old is None else old + mask.value
    return Lazy(s.shape, dtype, w.origin, s.make, ("scores", q, kt, scale, value))


def probs(w, s: Lazy, dtype) -> Lazy:
    return Lazy(s.shape, dtype, w.origin, _refusing(w, SCORES_ONLY), ("probs",) + s.tag[1:])


def attention_of_probs(w, p: Val, v: Val, dtype) -> Act:
    q, kt, scale, mask = p.tag[1:]
    k = w.view_of(kt, lambda t: t.transpose(-1, -2))
    return attention(w, q, k, v, scale, mask, False, dtype)


def causal_of(w, mask, is_causal: bool, s: int, sk: int) -> bool:
    """Whether a mask (None, a bool mask where True attends, or an additive float mask) is causal (True) or lets
    every query see every key (False); anything else is refused."""
    if s != sk:
        raise w.refuse(f"{s} queries against {sk} keys: the runtime's attention is prefill (as many queries as keys)")
    if mask is None:
        return bool(is_causal)
    if is_causal:
        raise w.refuse("both a mask and is_causal")
    m = mask.value if isinstance(mask, Const) else mask
    m = m.broadcast_to(m.shape[:-2] + (s, sk)) if m.dim() >= 2 else m.broadcast_to((s, sk))
    if m.dtype == torch.bool:
        allowed = m
    else:
        allowed = m == 0
        if not bool((allowed | (m <= MASKED)).all()):
            raise w.refuse("an additive attention mask with entries other than 0 and large negatives (a bias such "
                           "as ALiBi): the runtime's attention takes no bias")
    if bool(allowed.all()):
        return False
    if bool((allowed == torch.ones(s, sk, dtype=torch.bool, device=allowed.device).tril()).all()):
        return True
    raise w.refuse("an attention mask that is neither causal nor full (padding, sliding window, prefix): the "
                   "runtime's attention is causal or full")


def attention(w, q: Val, k: Val, v: Val, scale: float | None, mask, is_causal: bool, dtype) -> Act:
    for name, t in (("query", q), ("key", k), ("value", v)):
        if len(t.shape) < 3:
            raise w.refuse(f"the {name} is {t.shape}; attention takes [..., heads, S, D]")
    *_, h, s, d = q.shape
    hk, sk = k.shape[-3], k.shape[-2]
    if v.shape[-3:] != k.shape[-3:-1] + (d,) or k.shape[-1] != d or h % hk:
        raise w.refuse(f"query {q.shape}, key {k.shape}, value {v.shape}: attention takes q, k, v of one head "
                       "dimension, as many keys as values, and query heads a multiple of the key heads")
    if mask is not None and not isinstance(mask, (Const, torch.Tensor)):
        raise w.refuse("an attention mask computed from the inputs (a padding mask): the runtime's attention takes "
                       "no mask, only causal or none; export without the attention_mask argument")
    causal = causal_of(w, mask, is_causal, s, sk)
    qa = heads(w, q, "the queries")
    ka, va = (_repeat_heads(w, heads(w, t, f"the {n}"), t.shape, h) for n, t in (("keys", k), ("values", v)))
    scale = 1 / math.sqrt(d) if scale is None else scale
    qt = qa.tensor
    if not math.isclose(scale * math.sqrt(d), 1.0, rel_tol=1e-6):
        qt = elementwise.run(w, "binary", "mul", [qa, scale * math.sqrt(d)], qa.shape, qa.dtype).tensor
    t = w.rec.call("attention", qt, ka.tensor, va.tensor, heads=h, causal=causal)
    return Act(t, qa.view, dtype, w.origin)


def _repeat_heads(w, a: Act, shape: tuple[int, ...], h: int) -> Act:
    """Keys or values with fewer heads than the queries (grouped-query attention), each repeated h / hk times, as
    Hugging Face's repeat_kv does: the runtime's attention takes as many key heads as query heads."""
    hk = shape[-3]
    if hk == h:
        return a
    f = tuple(a.tensor.shape)
    idx = a.view.index(math.prod(f))
    rep = idx.unsqueeze(-3).expand(*shape[:-3], hk, h // hk, *shape[-2:]).reshape(*shape[:-3], h, *shape[-2:])
    target = views.heads(tuple(rep.shape))
    g = gather(w, a, [target], index=rep, what="repeat_kv")
    if g is None:
        raise w.refuse(f"keys or values {shape} cannot be repeated to {h} heads")
    return g


def is_scores(v) -> bool:
    return isinstance(v, Val) and v.has("scores")


def is_probs(v) -> bool:
    return isinstance(v, Val) and v.has("probs")
