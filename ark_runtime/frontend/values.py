"""What each node of an exported graph is while it is mapped (imports torch: only from_torch imports this module):

  Const  a tensor (or number) known at import: a parameter, a buffer, a literal, or computed from those alone
  Act    an activation: a model tensor and the view PyTorch's value is of it (views.py)
  Lazy   a value made only if something needs it: a cast the model cannot make yet, attention's scores and
         probabilities on their way to attention, a gather of heads; forcing it makes an Act or raises the
         FrontendError it carries

A value may carry a tag: what it is in a pattern (an RMSNorm's mean square, rotate_half of a query), so that a
later node can map the whole pattern to one op (patterns.py) and what was made on the way is never used (the
recorder keeps only what the outputs need).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ark_runtime.frontend.errors import FrontendError
from ark_runtime.frontend.imported import Origin, Source
from ark_runtime.frontend.views import View

SUPPORTED = ("linear/matmul/mm/addmm/bmm with weights the module holds, embedding, add/sub/mul/div/maximum/pow "
             "(exponents 2, 3, 0.5, -0.5, 1, -1), neg/exp/sqrt/rsqrt/tanh/relu/silu/gelu/sigmoid, mean/sum/amax over "
             "the last axis, softmax over the last axis, layer_norm, rms_norm and the x * rsqrt(mean(x^2) + eps) * w "
             "pattern, scaled_dot_product_attention and the matmul-softmax-matmul pattern (no mask, a causal or a "
             "full mask), rotate_half rotary embeddings, view/reshape/permute/transpose/unsqueeze/expand/slice/select, "
             "dropout in eval mode, casts (see docs/runtime.md, \"From PyTorch\")")


def refuse(origin: Origin, what: str, supported: str = SUPPORTED) -> FrontendError:
    where = f"{origin.target} (node {origin.node!r}, module {origin.module_path or '<top>'!r})"
    return FrontendError(f"{where}: {what}" + (f". Supported: {supported}" if supported else ""))


class Val:
    __slots__ = ("shape", "dtype", "origin", "tag")

    def __init__(self, shape, dtype, origin: Origin, tag: tuple | None = None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.origin = origin
        self.tag = tag

    def has(self, name: str) -> bool:
        return self.tag is not None and self.tag[0] == name


class Const(Val):
    """Known at import. `root` names the parameter or buffer `value` is a view of, and `steps` the view ops that made
    it from there (replayed at bind time, no copy); a value computed otherwise has no root (a CONSTANT, a copy)."""

    __slots__ = ("value", "root", "steps")

    def __init__(self, value: Any, origin: Origin, root: tuple[Source, str] | None = None, steps: tuple = ()):
        if isinstance(value, torch.Tensor):
            super().__init__(value.shape, value.dtype, origin)
        else:
            super().__init__((), None, origin)
        self.value = value
        self.root = root
        self.steps = steps

    @property
    def is_tensor(self) -> bool:
        return isinstance(self.value, torch.Tensor)


class Act(Val):
    """A model tensor (the scratch model's) and the view the PyTorch value is of it."""

    __slots__ = ("tensor", "view")

    def __init__(self, tensor, view: View, dtype, origin: Origin, tag: tuple | None = None):
        super().__init__(view.shape, dtype, origin, tag)
        self.tensor = tensor
        self.view = view


class Lazy(Val):
    __slots__ = ("make", "made", "error")

    def __init__(self, shape, dtype, origin: Origin, make: Callable[[], Act], tag: tuple | None = None,
                 error: FrontendError | None = None):
        super().__init__(shape, dtype, origin, tag)
        self.make = make
        self.made: Act | None = None
        self.error = error  # what forcing it raises, where that is known before (an op not mapped)


def failing(shape, dtype, origin: Origin, error: FrontendError, tag: tuple | None = None) -> Lazy:
    """A value that raises `error` if anything needs it (an op not mapped, unless a pattern takes it whole)."""
    def make():
        raise error
    return Lazy(shape, dtype, origin, make, tag, error)


def force(v: Val) -> Act | Const:
    """The value as an Act (a Lazy made now, once), or the Const it is."""
    if isinstance(v, Lazy):
        if v.made is None:
            v.made = v.make()
        return v.made
    return v


def strip_casts(v: Val) -> Val:
    """The value a chain of casts started from."""
    while v.has("cast"):
        v = v.tag[1]
    return v
