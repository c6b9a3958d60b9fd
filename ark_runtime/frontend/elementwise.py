"""Elementwise ops in model space. An elementwise op commutes with views, so it runs on whole model tensors and its
result keeps the view of the operand it is laid out like (the frame): rotary embedding on heads split out of a
projection is a mul on the projection's tensor. Constants are laid out through the frame's view and cut down to what
varies (views.to_frame, views.shrink): cos and sin of shape [1, 1, S, D] against queries [1, H, S, D] become [S, H*D].
Activations must share the frame's layout, or both be plain with NumPy's broadcasting meaning PyTorch's.
(Imports torch: only from_torch imports this module.)"""

from __future__ import annotations

import torch

from ark_runtime.frontend import views
from ark_runtime.frontend.layouts import gather
from ark_runtime.frontend.values import Act, Const, Val, force


def run(w, kind: str, fn: str, operands: list[Val | float | int], shape: tuple[int, ...], dtype) -> Act:
    """`kind` ("unary" or "binary") op `fn` on the operands (values or Python numbers), the result [shape] in `dtype`
    (a torch dtype: the node's)."""
    if w.pending(*(v for v in operands if isinstance(v, Val))):
        return w.lazy(shape, dtype, lambda: run(w, kind, fn, [force(v) if isinstance(v, Val) else v
                                                             for v in operands], shape, dtype))
    model_dtype = w.float_dtype(dtype, "the result")
    ops = [force(v) if isinstance(v, Val) else v for v in operands]
    acts = [a for a in ops if isinstance(a, Act)]
    for a in acts:
        if a.dtype != dtype:
            raise w.refuse(f"an operand is {a.dtype} and the result {dtype}: mixed dtypes need a cast the "
                           "runtime's elementwise ops do not make; keep the module in one dtype")
    frame = next((a for a in acts if a.shape == shape), None)
    if frame is None:
        f_shape, f_view = views.canon(shape), views.plain(shape)
    else:
        f_shape, f_view = tuple(frame.tensor.shape), frame.view
    fast = views.is_plain(f_view, f_shape) and f_shape == views.canon(shape)

    tensors = []
    for a in ops:
        if isinstance(a, Act):
            tensors.append(_in_frame(w, a, f_shape, f_view, fast))
        else:
            tensors.append(_constant(w, a, shape, f_shape, f_view, fast, model_dtype))
    t = w.rec.call(kind, fn, *tensors)
    if tuple(t.shape) != f_shape:
        raise w.refuse(f"the operands' layouts broadcast to model shape {tuple(t.shape)}, not {f_shape}")
    return Act(t, f_view, dtype, w.origin)


def _in_frame(w, a: Act, f_shape, f_view, fast: bool):
    if tuple(a.tensor.shape) == f_shape and views.same(a.view, f_view):
        return a.tensor
    if fast and views.is_plain(a.view, tuple(a.tensor.shape)) and tuple(a.tensor.shape) == views.canon(a.shape):
        return a.tensor
    if a.shape == f_view.shape:
        g = gather(w, a, [(f_shape, f_view)], what="relaid")
        if g is not None:
            return g.tensor
    raise w.refuse(f"operand {a.shape} lies in model tensor {tuple(a.tensor.shape)} under another view than the "
                   f"result's ({f_shape}); an elementwise op needs its activations laid out alike")


def _constant(w, c, shape, f_shape, f_view, fast: bool, model_dtype: str):
    if not isinstance(c, Const):
        return w.rec.constant(torch.tensor([float(c)]), model_dtype, "scalar")
    if not c.is_tensor:
        return w.rec.constant(torch.tensor([float(c.value)]), model_dtype, "scalar")
    value = c.value
    if fast:
        stripped = value.shape
        while len(stripped) > 1 and stripped[0] == 1:
            stripped = stripped[1:]
        if c.root is not None:
            return w.rec.constant(value, model_dtype, w.base_name(c), c.root, c.steps, shape=tuple(stripped) or (1,))
        return w.rec.constant(views.shrink(value.reshape(stripped or (1,))), model_dtype, w.base_name(c),
                              made_by=c.origin.node)
    laid = views.to_frame(value, shape, f_view, f_shape)
    if laid is None:
        raise w.refuse(f"constant {tuple(value.shape)} cannot be laid out in model tensor {f_shape}: the value's view "
                       "repeats elements the constant gives different values")
    return w.rec.constant(views.shrink(laid), model_dtype, w.base_name(c), made_by=c.origin.node)
