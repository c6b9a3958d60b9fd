"""A PyTorch module as a Model, through torch.export:

    imported = from_torch(module.eval(), (input_ids,), {"use_cache": False})

The module is exported with fixed shapes (the example's) and the default export IR: ATen ops as the module called
them, with linear, scaled_dot_product_attention, layer_norm, gelu, silu and softmax whole, where run_decompositions()
would cut attention into its math and linear into permutes and mm. The decomposed forms (addmm, mm, bmm, permute,
_softmax, native_layer_norm, _to_copy, clone) map as well, so an ExportedProgram passed in after run_decompositions()
maps too. The graph is walked node by node (graph_walk.py) onto the model API; docs/runtime.md ("From PyTorch")
lists what maps and what is refused. torch is imported here, when called, never when ark_runtime is imported.
"""

from __future__ import annotations

from typing import Any

from ark_runtime.frontend.errors import FrontendError
from ark_runtime.frontend.imported import Imported, InputBinding, Origin, OutputBinding, Source

LINEAR_WEIGHTS = ("copy", "transpose")


def from_torch(module, example_inputs: Any = (), example_kwargs: dict | None = None, *, name: str | None = None,
               linear_weights: str = "copy") -> Imported:
    """The module (in eval mode), or an ExportedProgram, mapped onto the model API for the example's shapes.

    `linear_weights`: a Linear holds its weight [N, K] and the runtime's matmul takes [K, N]: "copy" binds the weight
    transposed once at import (a copy, `InputBinding.copied`); "transpose" binds PyTorch's weight itself and
    transposes it in the model (m.transpose: each run, no copy kept). Raises FrontendError naming the first op it
    cannot map, its graph node and its module path."""
    try:
        import torch
    except ImportError as e:
        raise FrontendError("from_torch needs PyTorch: install the project's torch extra (pip install -e "
                            "'.[torch]')") from e
    if linear_weights not in LINEAR_WEIGHTS:
        raise FrontendError(f"linear_weights={linear_weights!r} is not one of {', '.join(map(repr, LINEAR_WEIGHTS))}")
    if isinstance(module, torch.export.ExportedProgram):
        return _import(module, None, name or "exported", linear_weights)
    if not isinstance(module, torch.nn.Module):
        raise FrontendError(f"from_torch takes a torch.nn.Module or a torch.export.ExportedProgram, not "
                            f"{type(module).__name__}")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)):
        raise FrontendError(f"example_inputs must be a tuple of the module's positional arguments (or one tensor), "
                            f"not {type(example_inputs).__name__}")
    if example_kwargs is not None and not isinstance(example_kwargs, dict):
        raise FrontendError(f"example_kwargs must be a dict of keyword arguments, not {type(example_kwargs).__name__}")
    try:
        exported = torch.export.export(module, tuple(example_inputs), kwargs=dict(example_kwargs or {}), strict=False)
    except Exception as e:  # torch.export raises many kinds; each is the example's or the module's fault
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise FrontendError(f"torch.export could not trace {type(module).__name__} with these example inputs: "
                            f"{type(e).__name__}: {first}") from e
    return _import(exported, module, name or type(module).__name__, linear_weights)


def _import(ep, module, name: str, linear_weights: str) -> Imported:
    import torch
    import torch.utils._pytree as pytree
    from torch.export.graph_signature import InputKind, OutputKind

    from ark_runtime.frontend import views
    from ark_runtime.frontend.graph_walk import Walk, check_static, origin_of, walk
    from ark_runtime.frontend.layouts import as_act, rowwise
    from ark_runtime.frontend.recorder import DTYPES, Recorder, capabilities, identifier
    from ark_runtime.frontend.values import Act, Const, failing, force, refuse

    rec = Recorder(identifier(name))
    w = Walk(rec, capabilities(), linear_weights)
    graph = ep.graph_module.graph
    places = [n for n in graph.nodes if n.op == "placeholder"]
    inputs, user_inputs, specialized = {}, [], {}
    for node, spec in zip(places, ep.graph_signature.input_specs):
        check_static(node)
        origin = Origin(node.name, "placeholder", spec.target or "")
        rec.current = origin
        if spec.kind is InputKind.PARAMETER:
            inputs[node] = Const(ep.state_dict[spec.target].detach(), origin, (Source.PARAMETER, spec.target))
        elif spec.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            held = ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target]
            inputs[node] = Const(held.detach(), origin, (Source.BUFFER, spec.target))
        elif spec.kind is InputKind.USER_INPUT:
            arg = spec.arg.name
            user_inputs.append(arg)
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor):
                specialized[arg] = getattr(spec.arg, "value", val)
                inputs[node] = Const(specialized[arg], origin)
            elif val.dtype not in DTYPES or val.dim() == 0:
                inputs[node] = failing(val.shape, val.dtype, origin, refuse(
                    origin, f"argument {arg!r} is a {val.dtype} tensor of shape {tuple(val.shape)}; the runtime takes "
                    "fp32, fp16 or bf16 activations and int32/int64 ids, with at least one axis", supported=""))
            else:
                shape = tuple(val.shape)
                keep = 2 if val.is_floating_point() else 1
                binding = InputBinding("", Source.USER_INPUT, arg, views.canon(shape, keep), DTYPES[val.dtype],
                                       torch_shape=shape, torch_dtype=str(val.dtype).removeprefix("torch."))
                inputs[node] = Act(rec.input(arg, binding), views.plain(shape), val.dtype, origin)
        else:
            raise refuse(origin, f"an input of kind {spec.kind.name} (custom objects and effect tokens are not "
                         "mapped)", supported="")

    values = walk(w, ep.graph_module, graph, inputs)

    out_node = next(n for n in graph.nodes if n.op == "output")
    origin = origin_of(out_node)
    out_spec = ep.call_spec.out_spec
    paths = [".".join(str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in p)
             for p, _ in pytree.tree_flatten_with_path(
                 pytree.tree_unflatten(list(range(out_spec.num_leaves)), out_spec))[0]]
    kinds = [s.kind for s in ep.graph_signature.output_specs]
    made, bindings_out = [], []
    with w.at(origin, None):
        for value, kind, spec in zip(values, kinds, ep.graph_signature.output_specs):
            if kind is not OutputKind.USER_OUTPUT:
                raise refuse(origin, f"the module writes {spec.target or spec.arg.name!r} while it runs "
                             f"({kind.name}: a cache, running statistics or an argument changed in place)",
                             supported="")
        user_values = [v for v, k in zip(values, kinds) if k is OutputKind.USER_OUTPUT]
        for value, path in zip(user_values, paths):
            label = identifier(path) if path and path[0].isalpha() else f"output_{path}".rstrip("_")
            value = force(value) if value is not None else None
            if isinstance(value, Const) and not value.is_tensor:
                raise refuse(origin, f"output {label} is the number {value.value!r}, not a tensor", supported="")
            if value is None:
                raise refuse(origin, f"output {label} is None", supported="")
            a = as_act(w, value, f"output {label}")
            if not views.is_plain(a.view, tuple(a.tensor.shape)):  # the same elements in the same order: as it is
                a = rowwise(w, a, f"output {label}")
            t = a.tensor
            if t.producer is None:  # an argument or constant returned as it is: the model's outputs are computed
                t = rec.call("unary", "identity", t)
            made.append((t, label))
            bindings_out.append((path or label, tuple(value.shape), t.dtype))

    model, bindings, origins, names = rec.finish(made)
    model.check()
    outputs = tuple(OutputBinding(n, p, s, d) for n, (p, s, d) in zip(names, bindings_out))
    return Imported(model, tuple(bindings), outputs, origins, tuple(user_inputs), specialized, exported=ep,
                    module=module)
