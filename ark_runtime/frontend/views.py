"""Where a PyTorch value's elements lie in a model tensor: a strided view (shape, strides, offset) over the tensor's
row-major elements, as PyTorch's own views describe memory. View ops are run by PyTorch itself on a meta tensor, so
transpose, permute, unsqueeze, expand, slice and select mean here exactly what they mean there. (Imports torch: only
from_torch imports this module.)"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class View:
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    def meta(self, numel: int) -> torch.Tensor:
        return torch.empty(max(numel, 1), device="meta").as_strided(self.shape, self.strides, self.offset)

    def index(self, numel: int) -> torch.Tensor:
        """The model tensor's flat element index at every position of the value (int64, CPU)."""
        return torch.arange(max(numel, 1)).as_strided(self.shape, self.strides, self.offset)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for s in reversed(shape):
        out.append(step)
        step *= s
    return tuple(reversed(out))


def plain(shape: tuple[int, ...]) -> View:
    return View(tuple(shape), contiguous_strides(tuple(shape)), 0)


def same(a: View, b: View) -> bool:
    """Equal views: strides compared only where an axis has more than one element (PyTorch's own rule)."""
    return (a.shape == b.shape and a.offset == b.offset
            and all(x == y for n, x, y in zip(a.shape, a.strides, b.strides) if n > 1))


def is_plain(view: View, model_shape: tuple[int, ...]) -> bool:
    """The value is the model tensor reshaped: every element once, in row-major order."""
    return math.prod(view.shape) == math.prod(model_shape) and same(view, plain(view.shape))


def rowwise(view: View, model_shape: tuple[int, ...]) -> bool:
    """The value is the model tensor reshaped with its last axis kept: row-wise ops (matmul, norms, softmax, a
    reduction over the last axis) act on it as on the model tensor."""
    return is_plain(view, model_shape) and len(view.shape) >= 1 and view.shape[-1] == model_shape[-1]


def one_to_one(view: View, model_shape: tuple[int, ...]) -> bool:
    """Every element of the model tensor appears exactly once in the value (a permuted reshape)."""
    if view.offset or math.prod(view.shape) != math.prod(model_shape):
        return False
    dims = sorted((st, n) for n, st in zip(view.shape, view.strides) if n > 1)
    step = 1
    for st, n in dims:
        if st != step:
            return False
        step *= n
    return True


def canon(shape: tuple[int, ...], keep: int = 2) -> tuple[int, ...]:
    """A value's model shape: its leading axes of 1 dropped, `keep` axes kept (attention and rope then see
    [S, heads * D] at batch 1, and an embedding can gather the rows of a 2-D result; ids keep one axis, so their
    embedding is 2-D)."""
    shape = tuple(shape)
    k = 0
    while k < len(shape) - keep and shape[k] == 1:
        k += 1
    return shape[k:]


def heads(shape: tuple[int, ...]) -> tuple[tuple[int, ...], View] | None:
    """For a value [..., H, S, D]: the model shape [..., S, H * D] that attention takes, and the view that splits it
    into heads (what view(..., S, H, D).transpose(-3, -2) makes of a projection's output)."""
    if len(shape) < 3:
        return None
    *lead, h, s, d = shape
    model = canon(tuple(lead) + (s, h * d))
    e = h * d
    strides = tuple(st * s * e for st in contiguous_strides(tuple(lead))) + (d, e, 1)
    return model, View(tuple(shape), strides, 0)


def apply(view: View, numel: int, fn) -> View | None:
    """The view fn (a PyTorch view op on a tensor) makes of this one, or None where it would copy."""
    try:
        out = fn(view.meta(numel))
    except RuntimeError:
        return None
    return View(tuple(out.shape), tuple(out.stride()), out.storage_offset())


def to_frame(value: torch.Tensor, out_shape: tuple[int, ...], view: View, model_shape: tuple[int, ...]):
    """A constant that broadcasts to the value's shape, laid out as the model tensor under `view`: a tensor of
    model_shape, or None where two positions the view maps to one element would need different values."""
    full = value.expand(out_shape).reshape(-1)
    where = view.index(math.prod(model_shape)).reshape(-1).to(value.device)
    flat = torch.zeros(math.prod(model_shape), dtype=value.dtype, device=value.device)
    flat[where] = full  # where the view repeats an element (an expanded axis), the check below reads it back
    if not torch.equal(flat[where], full):
        return None
    return flat.view(model_shape)


def shrink(value: torch.Tensor) -> torch.Tensor:
    """A constant cut down to what varies: each axis along which it does not change reduced to 1, then leading axes
    of 1 dropped (it broadcasts back to the same values)."""
    for d in range(value.dim()):
        if value.shape[d] > 1 and bool((value == value.narrow(d, 0, 1)).all()):
            value = value.narrow(d, 0, 1)
    while value.dim() > 1 and value.shape[0] == 1:
        value = value[0]
    return value.contiguous()
