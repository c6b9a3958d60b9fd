"""The model a front end builds, twice: while the graph is walked every op goes into a scratch Model (its shape check
runs at once, so a refusal names the node), and `finish` replays into the Model returned only the ops and inputs the
outputs depend on. Patterns make their whole op late (an RMSNorm at its weight's multiply) and leave the ops made on
the way unused; replaying drops them. Also here: which of the newer model ops this runtime has (`capabilities`),
and the model inputs made for constants and parameters, each made once. (Imports torch: only from_torch imports it.)"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass

import torch

from ark_runtime.frontend.imported import TORCH_DTYPES, InputBinding, Origin, Source
from ark_runtime.model import Model, ModelError, Tensor

DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int32: "int32",
          torch.int64: "int32"}  # ids: the runtime's embedding takes int32


@dataclass(frozen=True)
class Capabilities:
    """Model ops added after the front end was written; where one is missing the mapping takes another way or says
    "not supported yet"."""

    rope_half: bool  # m.rope(x, cos, sin, style="half", head_dim=D)
    cast: bool  # m.cast(x, dtype)
    transpose: bool  # m.transpose(x), the last two axes
    concat: bool  # m.concat(a, b), the last axis


def capabilities() -> Capabilities:
    m = Model("probe")
    x, c = m.input("x", (2, 4)), m.input("c", (2, 1))
    try:
        m.op("rope", x, c, c, style="half", head_dim=2)
        rope_half = True
    except ModelError:
        rope_half = False
    return Capabilities(rope_half, hasattr(Model, "cast"), hasattr(Model, "transpose"), hasattr(Model, "concat"))


def identifier(text: str) -> str:
    name = re.sub(r"\W+", "_", text).strip("_") or "t"
    return name if name[0].isalpha() else "t_" + name


class Recorder:
    def __init__(self, name: str):
        self.scratch = Model(name)
        self.calls: dict[int, tuple] = {}  # scratch tensor id -> (method, args, kwargs), tensors among the args
        self.bindings: dict[int, InputBinding] = {}
        self.origins: dict[int, Origin] = {}
        self.current = Origin("", "", "")
        self._inputs: dict[tuple, Tensor] = {}

    # --- building ----------------------------------------------------------------------------------------------------
    def call(self, method: str, *args, **kwargs) -> Tensor:
        """A model op through the Model's own method (`op`, `matmul`, `cast`, ...), checked now, replayed later."""
        t = getattr(self.scratch, method)(*args, **kwargs)
        self.calls[t.id] = (method, args, kwargs)
        self.origins[t.id] = self.current
        return t

    def _name(self, base: str) -> str:
        taken = {t.name for t in self.scratch.tensors}
        name, k = identifier(base), 1
        while name in taken:
            name, k = f"{identifier(base)}_{k}", k + 1
        return name

    def input(self, base: str, binding: InputBinding, key: tuple | None = None) -> Tensor:
        """A model input for `binding` (its name made unique from `base`); one per key."""
        if key is not None and key in self._inputs:
            return self._inputs[key]
        t = self.scratch.input(self._name(base), binding.shape, binding.dtype)
        self.bindings[t.id] = dataclasses.replace(binding, name=t.name)
        self.origins[t.id] = self.current
        if key is not None:
            self._inputs[key] = t
        return t

    def constant(self, value: torch.Tensor, dtype: str, base: str, root: tuple[Source, str] | None = None,
                 steps: tuple = (), shape: tuple[int, ...] | None = None, made_by: str | None = None) -> Tensor:
        """A model input holding `value` (reshaped to `shape`) in `dtype`. Where `root` names the parameter or buffer
        that `steps` make `value` from (views only), the input is bound to it, copied only where the layout or the
        dtype differs; else it holds a constant computed here (by the node `made_by`, default the current one), the
        same bytes made once."""
        shape = tuple(shape if shape is not None else value.shape) or (1,)
        torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
        if root is not None:
            steps = tuple(steps)
            if tuple(value.shape) != shape:
                steps += (("reshape", shape),)
            if not value.reshape(shape).is_contiguous():
                steps += (("contiguous",),)
            if value.dtype != torch_dtype:
                steps += (("dtype", dtype),)
            copied = any(s[0] in ("contiguous", "dtype") for s in steps)
            binding = InputBinding("", root[0], root[1], shape, dtype, steps, copied)
            return self.input(base, binding, ("root", root, steps))
        value = value.detach().reshape(shape).to(torch_dtype).contiguous()
        digest = hashlib.sha1(value.cpu().view(torch.uint8).numpy().tobytes()).hexdigest()
        binding = InputBinding("", Source.CONSTANT, made_by or self.current.node, shape, dtype, (), True, tensor=value)
        return self.input(base, binding, ("const", dtype, shape, digest))

    # --- the model returned ------------------------------------------------------------------------------------------
    def finish(self, outputs: list[tuple[Tensor, str]]
               ) -> tuple[Model, list[InputBinding], dict[str, Origin], list[str]]:
        """The model with only what `outputs` (scratch tensors, each with the name it takes) depend on, its inputs'
        bindings, every tensor's origin, and the name each output has in it."""
        live, stack = set(), [t.id for t, _ in outputs]
        while stack:
            tid = stack.pop()
            if tid in live:
                continue
            live.add(tid)
            if tid in self.calls:
                _, args, kwargs = self.calls[tid]
                stack.extend(a.id for a in (*args, *kwargs.values()) if isinstance(a, Tensor))
        model = Model(self.scratch.name)
        made: dict[int, Tensor] = {}
        bindings = []
        origins = {}
        for t in self.scratch.tensors:
            if t.id not in live:
                continue
            if t.producer is None:
                made[t.id] = model.input(t.name, t.shape, t.dtype, t.placement)
                bindings.append(self.bindings[t.id])
            else:
                method, args, kwargs = self.calls[t.id]
                args = [made[a.id] if isinstance(a, Tensor) else a for a in args]
                made[t.id] = getattr(model, method)(*args, **kwargs)
            origins[t.id] = self.origins[t.id]
        taken = {t.name for t in model.tensors}
        renamed = {}
        for t, name in outputs:
            new = made[t.id]
            if new.id in renamed or new.producer is None:
                continue
            name = identifier(name)
            if name != new.name and name in taken:
                k = 1
                while f"{name}_{k}" in taken:
                    k += 1
                name = f"{name}_{k}"
            taken.discard(new.name)
            taken.add(name)
            model.tensors[new.id] = dataclasses.replace(new, name=name)
            renamed[new.id] = name
        model.output(*(model.tensors[made[t.id].id] for t, _ in outputs))
        by_new = {made[old].id: origin for old, origin in origins.items()}
        return (model, bindings, {model.tensors[i].name: o for i, o in by_new.items()},
                [model.tensors[made[t.id].id].name for t, _ in outputs])
