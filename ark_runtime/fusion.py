"""Elementwise chains fused into one op: what the loop kernel runs instead of the model as written.

An op joins the chain before it when it is unary or binary, reads the chain's latest result, has that
result's shape and dtype, and that result is read by nothing else and is not a model output. The chain
becomes one `fused` op: its inputs are the tensors it reads from outside, its `steps` the functions in
order, each step's operands ("in", j) for input j or ("step", k) for an earlier step's value. Its tiles
compute every step in registers, so a chain of 64 ops reads its input once and writes its result once
instead of going through memory 64 times. Tensors that survive keep their names; the others exist only in
registers (Runtime.get() says so when asked for one).

A chain may also start at a matmul (the same rule for the ops that join it): the matmul keeps its kind, takes the
chain's outside inputs after A and B, and computes the chain in its epilogue, on each result before storing it
(attribute `epilogue`: steps as above, with ("in", 0) the matmul's result and ("in", j) its input j + 1). A GELU
after a projection or a residual add after one costs no pass over memory and no wait of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ark_runtime.model import Model, Op
from ark_runtime.ops import spec


@dataclass
class _Chain:
    ops: list[Op] = field(default_factory=list)

    @property
    def result(self) -> int:
        return self.ops[-1].output


def _consumers(model: Model) -> dict[int, int]:
    n: dict[int, int] = {}
    for op in model.ops:
        for t in set(op.inputs):
            n[t] = n.get(t, 0) + 1
    return n


def _joins(model: Model, chain: _Chain | None, op: Op, consumers: dict[int, int]) -> bool:
    if chain is None or not spec(op.kind).elementwise:
        return False
    last = model.tensors[chain.result]
    out = model.tensors[op.output]
    return (chain.result in op.inputs and consumers.get(chain.result, 0) == 1 and chain.result not in model.outputs
            and last.shape == out.shape and last.dtype == out.dtype)


def chains(model: Model) -> list[list[Op]]:
    """The model's ops grouped: each group one op, or a chain of two or more (elementwise ops, after an elementwise
    op or a matmul)."""
    consumers = _consumers(model)
    groups: list[list[Op]] = []
    chain: _Chain | None = None
    for op in model.ops:
        if _joins(model, chain, op, consumers):
            chain.ops.append(op)
            continue
        if chain is not None:
            groups.append(chain.ops)
            chain = None
        kind = spec(op.kind)
        if (kind.elementwise or kind.chain_head) and not op.attr("epilogue"):
            chain = _Chain([op])
        else:
            groups.append([op])
    if chain is not None:
        groups.append(chain.ops)
    return groups


def fuse(model: Model) -> Model:
    """The model with each elementwise chain as one `fused` op, and each chain after a matmul in the matmul's
    epilogue (the model itself when nothing fuses)."""
    groups = chains(model)
    if all(len(g) == 1 for g in groups):
        return model
    out, new_id = inputs_of(model)
    for group in groups:
        last = model.tensors[group[-1].output]
        if len(group) == 1:
            op = group[0]
            inputs = tuple(new_id[i] for i in op.inputs)
            kind, fn, attrs = op.kind, op.fn, op.attrs
        elif spec(group[0].kind).chain_head:
            head = group[0]
            steps, ext = _steps(group[1:], {head.output: ("in", 0)}, first_in=1)
            inputs = tuple(new_id[i] for i in (*head.inputs, *ext))
            kind, fn, attrs = head.kind, head.fn, (*head.attrs, ("epilogue", tuple(steps)))
        else:
            steps, ext = _steps(group, {}, first_in=0)
            inputs = tuple(new_id[i] for i in ext)
            kind, fn, attrs = "fused", "fused", (("steps", tuple(steps)),)
        t = out._tensor(last.name, last.shape, last.dtype, last.placement, len(out.ops),
                        None if last.alias is None else new_id[last.alias])
        out.ops.append(Op(len(out.ops), kind, fn, inputs, t.id, attrs))
        new_id[last.id] = t.id
    out.outputs = [new_id[t] for t in model.outputs]
    return out


def inputs_of(model: Model) -> tuple[Model, dict[int, int]]:
    """A new model of the same name holding `model`'s inputs, and their ids in it by their ids in `model`: where a
    rewrite pass (fusion, split_k.py) starts."""
    out = Model(model.name, rank=model.rank, world=model.world)
    new_id = {t.id: out.input(t.name, t.shape, t.dtype, t.placement).id for t in model.tensors if t.producer is None}
    out.states = [new_id[s] for s in model.states]
    return out, new_id


def _steps(ops: list[Op], known: dict[int, tuple], first_in: int) -> tuple[list[tuple], list[int]]:
    """The ops as steps (fn, operand...) and the outside tensors they read, in order: a tensor in `known` is that
    operand, an earlier op's result ("step", k), any other tensor ("in", first_in + its place among them)."""
    inside = {op.output: k for k, op in enumerate(ops)}
    ext: list[int] = []
    steps: list[tuple] = []
    for op in ops:
        refs = []
        for i in op.inputs:
            if i in inside and inside[i] < len(steps):
                refs.append(("step", inside[i]))
            elif i in known:
                refs.append(known[i])
            else:
                if i not in ext:
                    ext.append(i)
                refs.append(("in", first_in + ext.index(i)))
        steps.append((op.fn, *refs))
    return steps, ext


def step_operands(op: Op) -> list[tuple]:
    """A fused op's steps as (fn, operand...) with operands ("in", j) or ("step", k)."""
    return [tuple(s) for s in op.attr("steps")]
