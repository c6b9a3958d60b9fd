"""The walk over an exported graph, node by node: placeholders become constants (parameters, buffers) or model inputs
(the user's tensors); a node whose inputs are all known at import is computed there by PyTorch (masks, position ids,
rotary tables); a higher-order op that only sets grad or autocast modes is walked into; every other node goes to its
handler (aten_ops.py). A node with no handler is not refused at once: its value refuses if anything the outputs
need reads it, naming the op, the node and its module. (Imports torch: only from_torch imports this module.)"""

from __future__ import annotations

import math
import operator
from contextlib import contextmanager

import torch
from torch._ops import HigherOrderOperator, OpOverload

from ark_runtime.frontend import views
from ark_runtime.frontend.aten_ops import HANDLERS
from ark_runtime.frontend.imported import Origin
from ark_runtime.frontend.recorder import DTYPES, Capabilities, Recorder
from ark_runtime.frontend.values import SUPPORTED, Act, Const, Lazy, Val, failing, force, refuse
from ark_runtime.frontend.views import View
from ark_runtime.model import ModelError

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
MODE_HOPS = ("wrap_with_set_grad_enabled", "wrap_with_autocast")  # run their body with a mode set: walked into


def origin_of(node) -> Origin:
    stack = node.meta.get("nn_module_stack") or {}
    path = list(stack.values())[-1][0] if stack else ""
    target = node.target
    name = target.name() if hasattr(target, "name") and callable(target.name) else getattr(target, "__name__",
                                                                                             str(target))
    return Origin(node.name, str(name), str(path))


class Walk:
    """What handlers work with: the recorder, the capabilities, the node being mapped (its origin and the value
    PyTorch's tracing gave it, `out`), and helpers for dtypes, constants and views."""

    float_dtypes = FLOATS

    def __init__(self, rec: Recorder, caps: Capabilities, linear_weights: str):
        self.rec = rec
        self.caps = caps
        self.linear_weights = linear_weights
        self.memo: dict = {}
        self.origin = Origin("", "", "")
        self.out = None
        self.name = ""

    @contextmanager
    def at(self, origin: Origin, out, name: str = ""):
        saved = self.origin, self.out, self.name, self.rec.current
        self.origin, self.out, self.name, self.rec.current = origin, out, name, origin
        try:
            yield
        finally:
            self.origin, self.out, self.name, self.rec.current = saved

    # --- errors and dtypes -------------------------------------------------------------------------------------------
    def refuse(self, what: str, supported: str = SUPPORTED):
        return refuse(self.origin, what, supported)

    def refuse_at(self, origin: Origin, what: str, supported: str = SUPPORTED):
        return refuse(origin, what, supported)

    def dtype_of(self, dtype) -> str:
        if dtype not in DTYPES:
            raise self.refuse(f"a {dtype} tensor; the runtime's tensors are fp32, fp16, bf16 and int32 ids (cast the "
                              "module, e.g. module.float())")
        return DTYPES[dtype]

    def float_dtype(self, dtype, what: str) -> str:
        if dtype not in FLOATS:
            raise self.refuse(f"{what} is {dtype}; the runtime computes in fp32, fp16 or bf16")
        return DTYPES[dtype]

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(self.out.shape)

    # --- constants ---------------------------------------------------------------------------------------------------
    def base_name(self, c: Const) -> str:
        return c.root[1] if c.root is not None else f"const_{c.origin.node}"

    def const_tensor(self, c: Const, dtype: str, shape=None):
        return self.rec.constant(c.value, dtype, self.base_name(c), c.root, c.steps, shape=shape,
                                 made_by=c.origin.node)

    # --- values ------------------------------------------------------------------------------------------------------
    def lazy(self, shape, dtype, make, tag=None) -> Lazy:
        """A value made by `make` when needed, as if at this node (errors and provenance name it)."""
        origin, out, name = self.origin, self.out, self.name

        def made():
            with self.at(origin, out, name):
                return make()
        return Lazy(shape, dtype, origin, made, tag)

    def pending(self, *operands) -> bool:
        return any(isinstance(v, Lazy) and v.made is None for v in operands)

    def plain_view(self, shape=None) -> View:
        """The value as its model tensor reshaped (the node's own shape by default)."""
        return views.plain(tuple(shape if shape is not None else self.out_shape))

    def apply_view(self, x: Act, fn) -> View | None:
        return views.apply(x.view, math.prod(x.tensor.shape), fn)

    def view_of(self, x: Val, fn):
        """A view op on an activation (a Lazy one: when it is made): the same model tensor under a new view; ops that
        return several views (split) return a tuple."""
        if self.pending(x):
            if (x.has("scores") or x.has("probs")) and isinstance(self.out, torch.Tensor) \
                    and self.out.numel() == math.prod(x.shape):
                return Lazy(self.out_shape, x.dtype, self.origin, x.make, x.tag)  # still on its way to attention
            return self.lazy(self.out_shape, x.dtype, lambda: self.view_of(force(x), fn))
        x = force(x)
        numel = math.prod(x.tensor.shape)
        out = fn(x.view.meta(numel))
        if isinstance(out, (tuple, list)):
            return tuple(Act(x.tensor, View(tuple(o.shape), tuple(o.stride()), o.storage_offset()), x.dtype,
                             self.origin) for o in out)
        return Act(x.tensor, View(tuple(out.shape), tuple(out.stride()), out.storage_offset()), x.dtype, self.origin)


def bind_schema(op: OpOverload, args: tuple, kwargs: dict) -> dict:
    out = {}
    for i, arg in enumerate(op._schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            out[arg.name] = args[i]
        elif arg.name in kwargs:
            out[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
        else:
            out[arg.name] = None
    return out


def _map(x, env):
    if isinstance(x, torch.fx.Node):
        return env[x]
    if isinstance(x, (list, tuple)):
        return type(x)(_map(v, env) for v in x)
    if isinstance(x, dict):
        return {k: _map(v, env) for k, v in x.items()}
    return x


def _leaves(x):
    if isinstance(x, (list, tuple)):
        for v in x:
            yield from _leaves(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _leaves(v)
    else:
        yield x


def _raw(x, clone: bool):
    if isinstance(x, Const):
        return x.value.clone() if clone and x.is_tensor else x.value
    if isinstance(x, (list, tuple)):
        return type(x)(_raw(v, clone) for v in x)
    return x


def _frozen(x):
    if isinstance(x, (list, tuple)):
        return tuple(_frozen(v) for v in x)
    return x


def check_static(node) -> None:
    """Refuse a node whose shape is symbolic (a dynamic dimension)."""
    val = node.meta.get("val")
    for v in (val if isinstance(val, (tuple, list)) else (val,)):
        if isinstance(v, torch.Tensor) and any(not isinstance(d, int) for d in v.shape):
            raise refuse(origin_of(node), f"a dynamic shape {tuple(v.shape)}: the runtime plans for fixed shapes; "
                         "export without dynamic_shapes (one import per shape)", supported="")
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise refuse(origin_of(node), f"a symbolic value {v}: export with fixed shapes", supported="")


def walk(w: Walk, module, graph, inputs: dict) -> list:
    """Every node of `graph` (owned by `module`) mapped; returns the values of its output node's arguments."""
    env = {}
    for node in graph.nodes:
        check_static(node)
        origin = origin_of(node)
        with w.at(origin, node.meta.get("val"), node.name):
            if node.op == "placeholder":
                env[node] = inputs[node]
            elif node.op == "get_attr":
                attr = getattr(module, node.target)
                env[node] = Const(attr, origin) if isinstance(attr, torch.Tensor) else attr
            elif node.op == "call_function":
                env[node] = call(w, module, node, env)
            elif node.op == "output":
                return list(_map(node.args[0], env))
            else:
                raise w.refuse(f"a {node.op} node")
    raise w.refuse("a graph without an output node", supported="")


def _unmapped(w: Walk, node, why: str, inputs=()):
    """Values that refuse if needed; an input that already refuses gives its error (the first op not mapped)."""
    val = node.meta.get("val")
    upstream = [v.error for v in _leaves(inputs) if isinstance(v, Lazy) and v.error is not None]
    error = upstream[0] if upstream else w.refuse(why)
    if isinstance(val, (tuple, list)):
        return tuple(failing(getattr(v, "shape", ()), getattr(v, "dtype", None), w.origin, error) for v in val)
    return failing(getattr(val, "shape", ()), getattr(val, "dtype", None), w.origin, error)


def call(w: Walk, module, node, env):
    target = node.target
    args, kwargs = _map(node.args, env), _map(node.kwargs, env)
    if target is operator.getitem:
        seq, i = args
        return seq[i]
    if isinstance(target, HigherOrderOperator):
        return _inline(w, module, node, args)
    if not isinstance(target, OpOverload):
        values = [v for v in _leaves((args, kwargs)) if isinstance(v, Val)]
        if all(isinstance(v, Const) for v in values):
            return _wrap(w, target(*_raw(args, False), **_raw(kwargs, False)), None, ())
        return _unmapped(w, node, f"a call of {target!r}, which is no ATen op", (args, kwargs))
    values = [v for v in _leaves((args, kwargs)) if isinstance(v, Val)]
    name = target._schema.name.split("::")[-1]
    if all(isinstance(v, Const) for v in values) and name not in ("_assert_tensor_metadata",):
        return _fold(w, target, args, kwargs)
    handler = HANDLERS.get(name)
    if handler is None:
        return _unmapped(w, node, f"{name} is not mapped onto the runtime's ops", (args, kwargs))
    w.name = name
    try:
        return handler(w, target, bind_schema(target, args, kwargs))
    except ModelError as e:
        raise w.refuse(f"the model refused the op it maps to: {e}") from e


def _fold(w: Walk, op: OpOverload, args, kwargs):
    """A node computed at import by PyTorch: its inputs are all constants."""
    if torch.Tag.nondeterministic_seeded in op.tags:
        raise w.refuse(f"{op} draws random numbers; the imported model would fix one draw")
    result = op(*_raw(args, op._schema.is_mutable), **_raw(kwargs, op._schema.is_mutable))
    consts = [v for v in _leaves((args, kwargs)) if isinstance(v, Const) and v.is_tensor]
    root, steps = None, ()
    first = args[0] if args else None
    if (isinstance(first, Const) and first.root is not None and len(consts) == 1 and isinstance(result, torch.Tensor)
            and result.untyped_storage().data_ptr() == first.value.untyped_storage().data_ptr()):
        root, steps = first.root, first.steps + (("op", op, _frozen(_raw(args[1:], False)),
                                                  tuple(sorted(_raw(kwargs, False).items()))),)
    return _wrap(w, result, root, steps)


def _wrap(w: Walk, result, root, steps):
    if isinstance(result, torch.Tensor):
        return Const(result.detach(), w.origin, root, steps)
    if isinstance(result, (tuple, list)):
        return tuple(_wrap(w, r, None, ()) for r in result)
    return Const(result, w.origin) if isinstance(result, (int, float, bool)) else result


def _inline(w: Walk, module, node, args):
    """A higher-order op that runs its body under a grad or autocast mode: the body walked as if inline."""
    name = node.target.name()
    if name not in MODE_HOPS:
        return _unmapped(w, node, f"the higher-order op {name} (control flow or a wrapped region) is not mapped",
                         args)
    k = next((i for i, a in enumerate(args) if isinstance(a, torch.fx.GraphModule)), None)
    if k is None:
        raise w.refuse(f"{name} without a body")
    body, operands = args[k], args[k + 1:]
    if name == "wrap_with_autocast" and args[2] and any(isinstance(v, (Act, Lazy)) for v in operands):
        raise w.refuse("an autocast region over activations: the runtime computes each op in its inputs' dtype; "
                       "cast the module to one dtype instead of autocast")
    places = [n for n in body.graph.nodes if n.op == "placeholder"]
    outs = walk(w, body, body.graph, dict(zip(places, operands)))
    return tuple(outs) if len(outs) != 1 or isinstance(node.meta.get("val"), (tuple, list)) else outs[0]
