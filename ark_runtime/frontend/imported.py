"""What a front end returns: the Model, where each of its inputs comes from, what each output is, and the graph node
every model tensor was made for. `Imported.bind` gives the tensors a Runtime binds (PyTorch's own parameters, no
copy, where the model input is laid out as PyTorch holds it); `Imported.reference` runs the model in float64."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from ark_runtime.frontend.errors import FrontendError
from ark_runtime.model import Model


class Source(Enum):
    USER_INPUT = "user_input"  # an argument of the module's forward, named as torch.export names it
    PARAMETER = "parameter"  # a parameter of the module, by its fully qualified name
    BUFFER = "buffer"  # a buffer, or a tensor constant the module holds, by its name
    CONSTANT = "constant"  # computed once at import (from literals, buffers or parameters alone): a copy


@dataclass(frozen=True)
class Origin:
    """The FX node a model tensor was made for: its name, its ATen op, and the module it ran in."""

    node: str
    target: str
    module_path: str  # the innermost entry of node.meta["nn_module_stack"]; "" for the top module


@dataclass(frozen=True)
class InputBinding:
    """One model input and the PyTorch tensor that holds it.

    `steps` turn the tensor named by `target` into the model input: view ops replayed as recorded (no copy) and, where
    the runtime needs another layout or dtype, ("transpose",), ("contiguous",) or ("dtype", name), which copy.
    `copied` says whether any step copies. A user input's `torch_shape` and `torch_dtype` are the module's, its
    `shape` and `dtype` the model's (ids become int32, leading axes of 1 are dropped)."""

    name: str
    source: Source
    target: str
    shape: tuple[int, ...]
    dtype: str
    steps: tuple = ()
    copied: bool = False
    torch_shape: tuple[int, ...] = ()
    torch_dtype: str = ""
    tensor: Any = field(default=None, compare=False, repr=False)  # a CONSTANT's value, as computed at import


@dataclass(frozen=True)
class OutputBinding:
    """One output of the module: the model tensor that holds it, its place in the module's output (a pytree path such
    as "logits"), and its shape as PyTorch returns it (the model's drops leading axes of 1: same elements, same
    order)."""

    name: str
    path: str
    shape: tuple[int, ...]
    dtype: str


TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "int32": "int32"}


@dataclass(frozen=True)
class Imported:
    model: Model
    inputs: tuple[InputBinding, ...]
    outputs: tuple[OutputBinding, ...]
    origins: dict[str, Origin]  # every model tensor's name -> the node it was made for
    user_inputs: tuple[str, ...]  # the module's flattened arguments in order, as torch.export names them
    specialized: dict[str, Any] = field(default_factory=dict)  # non-tensor arguments export fixed, by name
    exported: Any = field(default=None, compare=False, repr=False)  # the ExportedProgram mapped
    module: Any = field(default=None, compare=False, repr=False)  # the module, whose tensors bind() reads

    # --- arguments ---------------------------------------------------------------------------------------------------
    def _arguments(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        """The module's arguments by user-input name, flattened as the export flattened its example."""
        import torch.utils._pytree as pytree

        in_spec = self.exported.call_spec.in_spec
        example_args, example_kwargs = pytree.tree_unflatten([None] * in_spec.num_leaves, in_spec)
        unknown = set(kwargs) - set(example_kwargs)
        if unknown:
            raise FrontendError(f"keyword arguments {sorted(unknown)} were not in the example the module was exported "
                                f"with (it took {sorted(example_kwargs)})")
        ordered = {k: kwargs[k] for k in example_kwargs if k in kwargs}
        leaves, spec = pytree.tree_flatten((tuple(args), ordered))
        if spec != in_spec:
            how = (f"got {len(args)} positional, keywords {sorted(kwargs)}" if len(args) != len(example_args)
                   or set(kwargs) != set(example_kwargs) else "a list, tuple or dict where the example had a tensor, "
                   "or the other way round")
            raise FrontendError(f"the arguments do not have the structure of the example the module was exported with "
                                f"({len(example_args)} positional, keywords {sorted(example_kwargs)}): {how}")
        given = dict(zip(self.user_inputs, leaves))
        for name, fixed in self.specialized.items():
            if given[name] != fixed:
                raise FrontendError(f"argument {name!r} is {given[name]!r}, but the export fixed it at {fixed!r}: "
                                    "import again with that value")
        return given

    def _torch_tensor(self, source: Source, target: str):
        """The tensor PyTorch holds now for a parameter or buffer (it follows module.to(device))."""
        if self.module is not None:
            try:
                return (self.module.get_parameter(target) if source is Source.PARAMETER
                        else self.module.get_buffer(target))
            except AttributeError:
                pass  # a tensor constant torch.export lifted: the exported program holds it
        ep = self.exported
        return ep.state_dict[target] if target in ep.state_dict else ep.constants[target]

    def bind(self, *args, device=None, **kwargs) -> dict:
        """Every model input's torch tensor, by model input name, for `Runtime(imported.model, bind=...)`: parameters
        and buffers where the module holds them now (a view, no copy, unless the binding says `copied`), the
        arguments given here (same structure as the example; ids converted to int32), constants moved to `device`
        (default: where the parameters are)."""
        import torch

        given = self._arguments(args, kwargs)
        out = {}
        for b in self.inputs:
            if b.source is Source.USER_INPUT:
                value = given[b.target]
                if not isinstance(value, torch.Tensor):
                    raise FrontendError(f"argument {b.target!r} must be a torch.Tensor, not {type(value).__name__}")
                if tuple(value.shape) != b.torch_shape:
                    raise FrontendError(f"argument {b.target!r} has shape {tuple(value.shape)}; the model was "
                                        f"imported for {b.torch_shape} (shapes are fixed at import: import again)")
                if value.is_floating_point() != (b.dtype != "int32"):
                    raise FrontendError(f"argument {b.target!r} is {value.dtype}; the module took {b.torch_dtype}")
                t = value.detach().to(getattr(torch, TORCH_DTYPES[b.dtype])).reshape(b.shape)
            elif b.source is Source.CONSTANT:
                t = b.tensor
            else:
                t = replay(self._torch_tensor(b.source, b.target).detach(), b.steps)
            out[b.name] = t
        if device is None:  # where the module's tensors are, else where the arguments are
            held = [t.device for b, t in zip(self.inputs, out.values())
                    if b.source in (Source.PARAMETER, Source.BUFFER)]
            given = [t.device for b, t in zip(self.inputs, out.values()) if b.source is Source.USER_INPUT]
            device = (held or given or [torch.device("cpu")])[0]
        return {name: t.to(device) for name, t in out.items()}

    # --- float64 reference -------------------------------------------------------------------------------------------
    def reference_inputs(self, *args, **kwargs) -> dict[str, np.ndarray]:
        """Every model input as a float64 array (ids as whole numbers), for reference.evaluate."""
        import torch

        return {name: t.detach().to("cpu", torch.float64).numpy()
                for name, t in self.bind(*args, device="cpu", **kwargs).items()}

    def reference(self, *args, **kwargs) -> list[np.ndarray]:
        """The module's outputs as the model computes them in float64 (reference.evaluate), in PyTorch's shapes."""
        from ark_runtime.reference import evaluate

        values = evaluate(self.model, self.reference_inputs(*args, **kwargs))
        ids = {t.name: t.id for t in self.model.tensors}
        return [values[ids[o.name]].reshape(o.shape) for o in self.outputs]


def replay(tensor, steps: tuple):
    """A parameter's tensor made into its model input: the recorded steps applied in order."""
    import torch

    for step in steps:
        kind = step[0]
        if kind == "op":  # an ATen view op as the graph applied it: (op, args after the tensor, kwargs)
            tensor = step[1](tensor, *step[2], **dict(step[3]))
        elif kind == "transpose":
            tensor = tensor.t()
        elif kind == "contiguous":
            tensor = tensor.contiguous()
        elif kind == "dtype":
            tensor = tensor.to(getattr(torch, TORCH_DTYPES[step[1]]))
        elif kind == "reshape":
            tensor = tensor.reshape(step[1])
        else:
            raise FrontendError(f"unknown binding step {step!r}")
    return tensor
