"""The ATen ops the front end maps, one handler each, by op name (the overload's packet: "add" for aten.add.Tensor and
aten.add.Scalar). A handler gets the walk (graph_walk.Walk: the recorder, the node's origin and result) and the op's
arguments bound to its schema's names, with nodes replaced by their values (values.py). Ops whose every input is
known at import never get here: graph_walk folds them with PyTorch. (Imports torch: only from_torch imports it.)"""

from __future__ import annotations

import math

import torch

from ark_runtime.frontend import elementwise, patterns, views
from ark_runtime.frontend.layouts import as_act, gather, rowwise, targets_for
from ark_runtime.frontend.values import Act, Const, Lazy, Val, failing, force

HANDLERS = {}


def handles(*names):
    def register(fn):
        for n in names:
            HANDLERS[n] = fn
        return fn
    return register


def _dim(w, dim, ndim: int) -> int:
    if isinstance(dim, (list, tuple)):
        if len(dim) != 1:
            raise w.refuse(f"a reduction over axes {list(dim)}; the runtime reduces over the last axis only")
        dim = dim[0]
    return dim % ndim if ndim else 0


def _last(w, dim, x: Val, what: str) -> None:
    if _dim(w, dim, len(x.shape)) != len(x.shape) - 1:
        raise w.refuse(f"{what} over axis {dim} of {x.shape}; the runtime's {what} is over the last axis")


# --- no-ops and views -------------------------------------------------------------------------------------------------
@handles("alias", "detach", "detach_", "contiguous", "clone", "lift_fresh_copy", "_unsafe_view_copy")
def same(w, op, a):
    return a["self"]


@handles("dropout", "feature_dropout", "alpha_dropout", "native_dropout")
def dropout(w, op, a):
    if a["train"] and a["p"]:
        raise w.refuse(f"dropout with p={a['p']} in training mode: call module.eval() before importing")
    x = a["input"]
    if w.name == "native_dropout":
        return x, failing(x.shape, torch.bool, w.origin, w.refuse("dropout's mask"))
    return x


@handles("_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size", "_assert_async")
def assertion(w, op, a):
    return None


@handles("view", "_unsafe_view", "reshape", "flatten", "unflatten", "view_as", "reshape_as")
def reshape(w, op, a):
    x = a["self"]
    shape = w.out_shape
    if w.pending(x):
        if x.has("scores") or x.has("probs"):
            return w.view_of(x, None)  # on its way to attention: keeps its tag
        return w.lazy(shape, x.dtype, lambda: force(reshape(w, op, {**a, "self": force(x)})))
    x = force(x)
    view = w.apply_view(x, lambda t: t.view(shape))
    if view is not None:
        return Act(x.tensor, view, x.dtype, w.origin)
    index = x.view.index(math.prod(x.tensor.shape)).reshape(shape)  # PyTorch copies: follow each element
    origin = w.origin

    def make():
        g = gather(w, x, targets_for(shape), index=index, what="reshaped")
        if g is None:
            raise w.refuse_at(origin, f"a reshape of {x.shape} to {shape} that moves elements across rows of model "
                              f"tensor {tuple(x.tensor.shape)} (neither a pick of columns nor of rows)")
        return Act(g.tensor, g.view, x.dtype, origin)
    return Lazy(shape, x.dtype, origin, make)


@handles("transpose", "permute", "t", "unsqueeze", "squeeze", "expand", "select", "slice", "narrow", "movedim",
         "swapaxes", "expand_as", "split", "split_with_sizes", "chunk", "unbind")
def view_op(w, op, a):
    x = a["self"] if "self" in a else a["input"]
    if w.name == "expand_as":
        shape = w.out_shape
        return w.view_of(x, lambda t: t.expand(shape))
    positional = [a[arg.name] for arg in op._schema.arguments[1:] if not arg.kwarg_only]
    keywords = {arg.name: a[arg.name] for arg in op._schema.arguments[1:] if arg.kwarg_only}
    out = w.view_of(x, lambda t: op(t, *positional, **keywords))
    if w.name == "slice" and isinstance(out, Act) and (a.get("step") or 1) == 1:
        d = a["dim"] % len(x.shape)
        n = x.shape[d]
        start = 0 if a["start"] is None else a["start"]
        end = n if a["end"] is None else a["end"]
        start, end = (min(max(v + n if v < 0 else v, 0), n) for v in (start, end))
        out.tag = ("slice", x, d, start, end)
    return out


# --- casts ------------------------------------------------------------------------------------------------------------
@handles("to", "_to_copy", "type_as", "_to_dtype", "type")
def to(w, op, a):
    if not isinstance(w.out, torch.Tensor):
        raise w.refuse("a conversion whose result is not one tensor")
    return patterns.cast(w, a["self"], w.out.dtype)


# --- elementwise ------------------------------------------------------------------------------------------------------
def _binary(w, fn: str, x, y):
    return elementwise.run(w, "binary", fn, [x, y], w.out_shape, w.out.dtype)


def _unary(w, fn: str, x):
    return elementwise.run(w, "unary", fn, [x], w.out_shape, w.out.dtype)


def _scaled_tag(out: Act, x, y) -> Act:
    for p, q in ((x, y), (y, x)):
        if isinstance(p, Val) and not isinstance(p, Const) and isinstance(q, Const) and q.is_tensor:
            out.tag = ("scaled", p, q)
    return out


def _times(w, v, alpha):
    if alpha == 1:
        return v
    if isinstance(v, (int, float)):
        return v * alpha
    if isinstance(v, Const):
        return Const(v.value * alpha, v.origin)
    return elementwise.run(w, "binary", "mul", [v, alpha], v.shape, v.dtype)


@handles("add")
def add(w, op, a):
    x, y = a["self"], _times(w, a["other"], a.get("alpha", 1))
    for s, m in ((x, y), (y, x)):
        if patterns.is_scores(s):
            return patterns.scores_masked(w, s, m if isinstance(m, Val) else Const(torch.tensor(float(m)), w.origin),
                                          w.out.dtype)
        if isinstance(s, Val) and s.has("mean_square") and patterns.number(m) is not None:
            out = _binary(w, "add", x, y)
            out.tag = ("mean_square_eps", s.tag[1], patterns.number(m))
            return out
    if isinstance(x, Val) and isinstance(y, Val):
        rope = patterns.rope_add(w, x, y)
        if rope is not None:
            return rope
    return _binary(w, "add", x, y)


@handles("sub")
def sub(w, op, a):
    return _binary(w, "sub", a["self"], _times(w, a["other"], a.get("alpha", 1)))


@handles("rsub")
def rsub(w, op, a):
    return _binary(w, "sub", a["other"], _times(w, a["self"], a.get("alpha", 1)))


@handles("mul")
def mul(w, op, a):
    x, y = a["self"], a["other"]
    for s, f in ((x, y), (y, x)):
        if patterns.is_scores(s) and patterns.number(f) is not None:
            return patterns.scores_scaled(w, s, patterns.number(f), w.out.dtype)
    if isinstance(x, Val) and isinstance(y, Val):
        rms = patterns.rms_mul(w, x, y, w.out.dtype)
        if rms is not None:
            return rms
    out = _scaled_tag(_binary(w, "mul", x, y), x, y)
    if x is y and isinstance(x, Val):
        out.tag = ("square", patterns.strip_casts(x))
    return out


@handles("div")
def div(w, op, a):
    if a.get("rounding_mode") is not None:
        raise w.refuse(f"division with rounding_mode={a['rounding_mode']!r}")
    x, y = a["self"], a["other"]
    if patterns.is_scores(x) and patterns.number(y) is not None:
        return patterns.scores_scaled(w, x, 1 / patterns.number(y), w.out.dtype)
    return _binary(w, "div", x, y)


@handles("maximum", "clamp_min")
def maximum(w, op, a):
    return _binary(w, "max", a["self"], a.get("other", a.get("min")))


UNARY = {"neg": "neg", "exp": "exp", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh", "relu": "relu", "silu": "silu"}


@handles(*UNARY)
def unary(w, op, a):
    x = a["self"]
    out = _unary(w, UNARY[w.name], x)
    name = w.name
    if name == "neg":
        out.tag = ("neg", x)
    elif name == "rsqrt" and isinstance(x, Val) and x.has("mean_square_eps"):
        out.tag = ("inv_rms",) + x.tag[1:]
    return out


@handles("gelu")
def gelu(w, op, a):
    approximate = a.get("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise w.refuse(f"gelu with approximate={approximate!r}")
    return _unary(w, "gelu_erf" if approximate == "none" else "gelu", a["self"])


@handles("sigmoid")
def sigmoid(w, op, a):
    x = a["self"]
    e = elementwise.run(w, "unary", "exp", [elementwise.run(w, "unary", "neg", [x], w.out_shape, w.out.dtype)],
                        w.out_shape, w.out.dtype)
    return _binary(w, "div", 1.0, elementwise.run(w, "binary", "add", [e, 1.0], w.out_shape, w.out.dtype))


@handles("reciprocal")
def reciprocal(w, op, a):
    return _binary(w, "div", 1.0, a["self"])


@handles("pow")
def pow_(w, op, a):
    x, e = a.get("self"), a.get("exponent")
    if not isinstance(x, Val) or isinstance(x, Const) or patterns.number(e) is None:
        raise w.refuse("pow with a tensor exponent or of a number")
    e = patterns.number(e)
    if e == 1:
        return x
    if e == 2:
        out = _binary(w, "mul", x, x)
        out.tag = ("square", patterns.strip_casts(x))
        return out
    if e == 3:
        sq = elementwise.run(w, "binary", "mul", [x, x], w.out_shape, w.out.dtype)
        return _binary(w, "mul", sq, x)
    if e in (0.5, -0.5):
        return _unary(w, "sqrt" if e > 0 else "rsqrt", x)
    if e == -1:
        return _binary(w, "div", 1.0, x)
    raise w.refuse(f"pow with exponent {e}; mapped: 1, 2, 3, 0.5, -0.5, -1")


# --- reductions, softmax, norms ---------------------------------------------------------------------------------------
REDUCE = {"mean": "mean", "sum": "sum", "amax": "max"}


@handles(*REDUCE)
def reduce(w, op, a):
    x = a["self"]
    name = w.name
    dim = a.get("dim")
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        raise w.refuse(f"{name} over every axis; the runtime reduces over the last axis only")
    _last(w, dim, x, "reduction")
    if a.get("dtype") is not None and a["dtype"] != x.dtype:
        raise w.refuse(f"{name} with dtype={a['dtype']}")

    def make():
        xa = rowwise(w, x, f"the {name}'s input")
        t = w.rec.call("reduce", REDUCE[name], xa.tensor)
        return Act(t, w.plain_view(), x.dtype, w.origin)
    out = w.lazy(w.out_shape, x.dtype, make) if w.pending(x) else make()
    if name == "mean" and x.has("square") and a.get("keepdim"):
        out.tag = ("mean_square", x.tag[1])
    return out


@handles("softmax", "_softmax", "_safe_softmax")
def softmax(w, op, a):
    x = a["self"]
    _last(w, a["dim"], x, "softmax")
    if patterns.is_scores(x):
        return patterns.probs(w, x, w.out.dtype)
    xa = rowwise(w, x, "the softmax's input")
    t = w.rec.call("softmax", xa.tensor)
    out = Act(t, xa.view, x.dtype, w.origin)
    return patterns.cast(w, out, w.out.dtype) if isinstance(w.out, torch.Tensor) else out


def _norm_param(w, p, d: int, fill: float, dtype: str, what: str):
    if p is None:
        return w.rec.constant(torch.full((d,), fill), dtype, f"{what}_{'ones' if fill else 'zeros'}")
    if not isinstance(p, Const) or not p.is_tensor or tuple(p.shape) != (d,):
        raise w.refuse(f"the {what} is not a ({d},) tensor the module holds")
    return w.const_tensor(p, dtype)


def _norm_input(w, a, name: str):
    """A norm's input, refused unless it normalizes over the last axis: (x, x as rows, its width, its dtype)."""
    x = a["input"]
    if list(a["normalized_shape"]) != [x.shape[-1]]:
        raise w.refuse(f"{name} over {list(a['normalized_shape'])} of {x.shape}; the runtime normalizes over the "
                       "last axis")
    return x, rowwise(w, x, f"the {name}'s input"), x.shape[-1], w.float_dtype(x.dtype, f"the {name}'s input")


@handles("layer_norm", "native_layer_norm")
def layer_norm(w, op, a):
    x, xa, d, dtype = _norm_input(w, a, "layer_norm")
    wt = _norm_param(w, a["weight"], d, 1.0, dtype, "weight")
    bt = _norm_param(w, a["bias"], d, 0.0, dtype, "bias")
    t = w.rec.call("layernorm", xa.tensor, wt, bt, eps=float(a["eps"]))
    out = Act(t, xa.view, x.dtype, w.origin)
    if w.name == "native_layer_norm":
        stats = failing(x.shape[:-1] + (1,), x.dtype, w.origin, w.refuse("layer_norm's mean and rstd"))
        return out, stats, stats
    return out


@handles("rms_norm")
def rms_norm(w, op, a):
    x, xa, d, dtype = _norm_input(w, a, "rms_norm")
    eps = a.get("eps")
    eps = torch.finfo(x.dtype).eps if eps is None else float(eps)
    t = w.rec.call("rmsnorm", xa.tensor, _norm_param(w, a["weight"], d, 1.0, dtype, "weight"), eps=eps)
    return Act(t, xa.view, x.dtype, w.origin)


# --- matmul, embedding, attention -------------------------------------------------------------------------------------
def _weights(w, b: Val, what: str):
    """A [K, N] weight the module holds, as a model input."""
    if not (isinstance(b, Const) and b.is_tensor and len(b.shape) == 2):
        raise w.refuse(f"{what} is an activation or not 2-D ({b.shape}); matmul maps onto the runtime's matmul as "
                       "activations [..., M, K] @ weights [K, N] the module holds, or as attention")
    return b


def _matmul(w, x: Val, weight: Const, bias, transposed: bool):
    xa = rowwise(w, x, "the matmul's input")
    dtype = w.float_dtype(x.dtype, "the matmul's input")
    if not transposed:
        wt = w.const_tensor(weight, dtype)
    elif w.linear_weights == "transpose":
        if not w.caps.transpose:
            raise w.refuse("linear_weights='transpose' is not supported yet: this runtime's Model has no transpose "
                           "op (Model.transpose); import with the default linear_weights='copy'", supported="")
        wt = w.rec.call("transpose", w.const_tensor(weight, dtype))
    elif weight.root is not None:  # the weight PyTorch holds is [N, K]: bound transposed, a copy made once
        wt = w.rec.constant(weight.value.t(), dtype, w.base_name(weight) + "_t", weight.root,
                            weight.steps + (("transpose",),))
    else:
        wt = w.rec.constant(weight.value.t(), dtype, w.base_name(weight) + "_t")
    t = w.rec.call("matmul", xa.tensor, wt)
    out = Act(t, w.plain_view(x.shape[:-1] + (t.shape[-1],)), x.dtype, w.origin)
    if bias is not None:
        out = elementwise.run(w, "binary", "add", [out, bias], out.shape, out.dtype)
    return out


@handles("linear")
def linear(w, op, a):
    return _matmul(w, a["input"], _weights(w, a["weight"], "the linear's weight"), a.get("bias"), transposed=True)


@handles("matmul", "mm", "bmm")
def matmul(w, op, a):
    x, y = a["self"], a.get("other", a.get("mat2"))
    if patterns.is_probs(x) and not isinstance(y, Const):
        return patterns.attention_of_probs(w, x, y, w.out.dtype)
    if isinstance(x, Val) and isinstance(y, Val) and not isinstance(x, Const) and not isinstance(y, Const) \
            and len(x.shape) >= 3 and len(y.shape) >= 3:
        return patterns.scores(w, x, y, w.out.dtype)
    if isinstance(x, Const):
        raise w.refuse("a matmul whose left operand is a constant; the runtime multiplies activations by weights")
    return _matmul(w, x, _weights(w, y, "the right operand"), None, transposed=False)


@handles("addmm")
def addmm(w, op, a):
    if a.get("beta", 1) != 1 or a.get("alpha", 1) != 1:
        raise w.refuse("addmm with beta or alpha other than 1")
    return _matmul(w, a["mat1"], _weights(w, a["mat2"], "the right operand"), a["self"], transposed=False)


@handles("embedding")
def embedding(w, op, a):
    table, ids = a["weight"], a["indices"]
    if not (isinstance(table, Const) and table.is_tensor and len(table.shape) == 2):
        raise w.refuse("an embedding whose table is not a 2-D tensor the module holds")
    ia = as_act(w, ids, "the ids") if not isinstance(ids, Const) else None
    if ia is None or ia.dtype.is_floating_point:
        raise w.refuse("embedding ids that are not integer activations")
    if not views.is_plain(ia.view, tuple(ia.tensor.shape)):
        raise w.refuse("embedding ids laid out as a view of another tensor")
    dtype = w.float_dtype(table.dtype, "the embedding table")
    t = w.rec.call("embedding", w.const_tensor(table, dtype), ia.tensor)
    return Act(t, w.plain_view(w.out_shape), table.dtype, w.origin)


@handles("scaled_dot_product_attention")
def sdpa(w, op, a):
    if a.get("dropout_p"):
        raise w.refuse(f"attention dropout p={a['dropout_p']}: call module.eval() before importing")
    q, k, v = a["query"], a["key"], a["value"]
    return patterns.attention(w, q, k, v, a.get("scale"), a.get("attn_mask"), bool(a.get("is_causal")),
                              w.out.dtype)


@handles("cat", "concat", "concatenate")
def cat(w, op, a):
    parts = list(a["tensors"])
    if not parts:
        raise w.refuse("cat of nothing")
    dim = a.get("dim", 0) % len(w.out_shape)
    rot = patterns.rotate_half(w, parts, dim)
    if rot is not None:
        return rot
    if dim != len(w.out_shape) - 1:
        raise w.refuse(f"cat along axis {dim} of {w.out_shape}; the runtime concatenates along the last axis only")
    if not w.caps.concat:
        raise w.refuse("cat is not supported yet: this runtime's Model has no concat op (Model.concat)",
                       supported="")
    tensors = [rowwise(w, p, "a part").tensor for p in parts]
    t = tensors[0]
    for nxt in tensors[1:]:
        t = w.rec.call("concat", t, nxt)
    return Act(t, w.plain_view(w.out_shape), w.out.dtype, w.origin)
