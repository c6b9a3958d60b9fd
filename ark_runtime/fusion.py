"""Elementwise chains fused into one op: what the loop kernel runs instead of the model as written.

An op joins the chain before it when it is unary or binary, reads the chain's latest result, has that
result's shape and dtype, and that result is read by nothing else and is not a model output. The chain
becomes one `fused` op: its inputs are the tensors it reads from outside, its `steps` the functions in
order, each step's operands ("in", j) for input j or ("step", k) for an earlier step's value. Its tiles
compute every step in registers, so a chain of 64 ops reads its input once and writes its result once
instead of going through memory 64 times. Tensors that survive keep their names; the others exist only in
registers (Runtime.get() says so when asked for one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ark_runtime.model import Model, Op

ELEMENTWISE = ("unary", "binary")


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
    if chain is None or op.kind not in ELEMENTWISE:
        return False
    last = model.tensors[chain.result]
    out = model.tensors[op.output]
    return (chain.result in op.inputs and consumers.get(chain.result, 0) == 1 and chain.result not in model.outputs
            and last.shape == out.shape and last.dtype == out.dtype)


def chains(model: Model) -> list[list[Op]]:
    """The model's ops grouped: each group one op, or an elementwise chain of two or more."""
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
        if op.kind in ELEMENTWISE:
            chain = _Chain([op])
        else:
            groups.append([op])
    if chain is not None:
        groups.append(chain.ops)
    return groups


def fuse(model: Model) -> Model:
    """The model with each elementwise chain as one `fused` op (the model itself when nothing fuses)."""
    groups = chains(model)
    if all(len(g) == 1 for g in groups):
        return model
    out = Model(model.name)
    new_id: dict[int, int] = {}
    for t in model.tensors:
        if t.producer is None:
            new_id[t.id] = out.input(t.name, t.shape, t.dtype, t.placement).id
    for group in groups:
        last = model.tensors[group[-1].output]
        if len(group) == 1:
            op = group[0]
            inputs = tuple(new_id[i] for i in op.inputs)
            kind, fn, attrs = op.kind, op.fn, op.attrs
        else:
            inside = {op.output: k for k, op in enumerate(group)}
            ext: list[int] = []
            steps = []
            for op in group:
                refs = []
                for i in op.inputs:
                    if i in inside and inside[i] < len(steps):
                        refs.append(("step", inside[i]))
                    else:
                        if i not in ext:
                            ext.append(i)
                        refs.append(("in", ext.index(i)))
                steps.append((op.fn, *refs))
            inputs = tuple(new_id[i] for i in ext)
            kind, fn, attrs = "fused", "fused", (("steps", tuple(steps)),)
        t = out._tensor(last.name, last.shape, last.dtype, last.placement, len(out.ops))
        out.ops.append(Op(len(out.ops), kind, fn, inputs, t.id, attrs))
        new_id[last.id] = t.id
    out.outputs = [new_id[t] for t in model.outputs]
    return out


def step_operands(op: Op) -> list[tuple]:
    """A fused op's steps as (fn, operand...) with operands ("in", j) or ("step", k)."""
    return [tuple(s) for s in op.attr("steps")]
