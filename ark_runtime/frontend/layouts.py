"""Activations laid out as an op needs them. Row-wise ops (matmul, norms, softmax, reductions) take a model tensor
whose rows are the value's last axis; attention takes [..., S, heads * D] with the heads split out of the last axis.
A value whose view is neither (a slice, repeated heads, rotate_half of a query) is gathered into a new model tensor,
exactly, with the ops the runtime has:

  the same rows, columns picked (with a sign)   a matmul by a 0/+1/-1 matrix (one nonzero per column: exact)
  whole rows picked, from a 2-D tensor          an embedding whose ids are the rows

Both are found by following every element's index through the view (PyTorch's own strides), once per layout.
(Imports torch: only from_torch imports this module.)"""

from __future__ import annotations

import math

import torch

from ark_runtime.frontend import views
from ark_runtime.frontend.values import Act, Const, Val, force
from ark_runtime.frontend.views import View


def gather(w, act: Act, targets: list[tuple[tuple[int, ...], View]], index: torch.Tensor | None = None,
           sign: torch.Tensor | None = None, what: str = "gather") -> Act | None:
    """The value whose element i is act's model element index[i] (default: act's own view) times sign[i], laid out as
    the first of `targets` (model shape, view) that a column pick or a row pick can make; None if none can."""
    f0 = tuple(act.tensor.shape)
    e0 = f0[-1]
    src = act.view.index(math.prod(f0)) if index is None else index
    for f1, view1 in targets:
        if not views.one_to_one(view1, f1) or view1.shape != tuple(src.shape):
            continue
        key = (f0, act.view, tuple(src.shape), f1, view1, None if sign is None else sign.numpy().tobytes(),
               None if index is None else index.numpy().tobytes())
        found = w.memo.get(key)
        if found is None:
            found = _plan(f0, src, f1, view1, sign)
            w.memo[key] = found
        if found[0] == "same":
            return Act(act.tensor, view1, act.dtype, w.origin)
        if found[0] == "columns":
            sel = torch.zeros(e0, f1[-1], dtype=torch.float32)
            sel[found[1], torch.arange(f1[-1])] = found[2]
            t = w.rec.call("matmul", act.tensor, w.rec.constant(sel, act.tensor.dtype, f"{what}_columns"))
            return Act(t, view1, act.dtype, w.origin)
        if found[0] == "rows":
            ids = w.rec.constant(found[1].reshape(f1[:-1]), "int32", f"{what}_rows")
            t = w.rec.call("embedding", act.tensor, ids)
            return Act(t, view1, act.dtype, w.origin)
    return None


def _plan(f0, src: torch.Tensor, f1, view1: View, sign: torch.Tensor | None):
    e0, e1 = f0[-1], f1[-1]
    pos = view1.index(math.prod(f1))
    src_row, src_col = torch.div(src, e0, rounding_mode="floor"), src % e0
    pos_row, pos_col = torch.div(pos, e1, rounding_mode="floor"), pos % e1
    if views.canon(f1[:-1], 1) == views.canon(f0[:-1], 1) and torch.equal(src_row, pos_row):
        cols = torch.full((e1,), -1, dtype=torch.int64)
        cols[pos_col.reshape(-1)] = src_col.reshape(-1)
        signs = torch.ones(e1)
        if sign is not None:
            signs[pos_col.reshape(-1)] = sign.reshape(-1).to(torch.float32)
        consistent = torch.equal(cols[pos_col], src_col) and (
            sign is None or torch.equal(signs[pos_col], sign.to(torch.float32).expand(src.shape)))
        if consistent and bool((cols >= 0).all()):
            if e0 == e1 and sign is None and torch.equal(cols, torch.arange(e1)):
                return ("same",)
            return ("columns", cols, signs)
    if sign is None and e0 == e1 and len(f0) == 2 and torch.equal(src_col, pos_col):
        rows = torch.full((math.prod(f1[:-1]),), -1, dtype=torch.int64)
        rows[pos_row.reshape(-1)] = src_row.reshape(-1)
        if torch.equal(rows[pos_row], src_row) and bool((rows >= 0).all()):
            return ("rows", rows.to(torch.int32))
    return ("none",)


def plain_target(shape: tuple[int, ...]) -> tuple[tuple[int, ...], View]:
    return views.canon(shape), views.plain(shape)


def targets_for(shape: tuple[int, ...]) -> list[tuple[tuple[int, ...], View]]:
    """Layouts a gathered value may take: plain first, then heads split out of the last axis."""
    out = [plain_target(shape)]
    split = views.heads(shape)
    if split is not None:
        out.append(split)
    return out


def as_act(w, v: Val, what: str) -> Act:
    """The value as an activation; a constant here is a model input holding it (bound where it has a root)."""
    v = force(v)
    if isinstance(v, Const):
        if not v.is_tensor or v.dtype not in w.float_dtypes:
            raise w.refuse(f"{what} is a constant {v.dtype or type(v.value).__name__}; the runtime's ops take "
                           "fp32, fp16 or bf16 tensors")
        shape = views.canon(v.shape) if v.shape else (1,)
        t = w.const_tensor(v, w.dtype_of(v.dtype), shape=shape)
        return Act(t, views.plain(v.shape or (1,)), w.dtype_of(v.dtype), v.origin)
    return v


def rowwise(w, v: Val, what: str = "the input") -> Act:
    """An Act whose model tensor has the value's last axis as its rows' (the value is a reshape of it)."""
    a = as_act(w, v, what)
    if views.rowwise(a.view, tuple(a.tensor.shape)):
        return a
    if not a.shape:
        raise w.refuse(f"{what} is a scalar (0-d) activation; model tensors have at least one axis")
    g = gather(w, a, [plain_target(a.shape)], what="rows_of")
    if g is None:
        raise w.refuse(f"{what} is a view of model tensor {tuple(a.tensor.shape)} (shape {a.shape}, strides "
                       f"{a.view.strides}, offset {a.view.offset}) that no op here lays out as rows: "
                       "a reshape that moves the last axis, or rows picked from a batched (3-D or more) tensor")
    return g


def heads(w, v: Val, what: str) -> Act:
    """An Act for value [..., H, S, D] whose model tensor is [..., S, H * D] under the heads view."""
    a = as_act(w, v, what)
    model, view = views.heads(a.shape)
    if views.canon(tuple(a.tensor.shape)) == model and views.same(a.view, view):
        return a
    g = gather(w, a, [(model, view)], what="heads_of")
    if g is None:
        raise w.refuse(f"{what} ({a.shape}) is laid out in model tensor {tuple(a.tensor.shape)} so that its heads "
                       "cannot be put side by side in rows ([..., S, heads * D], what attention takes)")
    return g
