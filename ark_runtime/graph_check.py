"""What a model's graph must be before it is lowered, checked as data (a model edited by hand, loaded from JSON or
made by a front end has not passed through the model API's checks): the problems found, each naming the tensors
and ops involved; `Model.check()` raises them."""

from __future__ import annotations

from ark_runtime.graph import DTYPE_BYTES, PLACEMENTS, Tensor


def _name(t: Tensor) -> str:
    return f"{t.name} (tensor {t.id})"


def problems(model) -> list[str]:
    from ark_runtime.ops import specs

    found: list[str] = []
    ts, ops = model.tensors, model.ops
    if not ops:
        found.append("it has no ops")
    if not model.outputs:
        found.append("it has no outputs: mark what it returns with m.output(...)")
    names: dict[str, int] = {}
    for i, t in enumerate(ts):
        if not isinstance(t, Tensor) or t.id != i:
            found.append(f"tensor {i} is {t!r}, not a Tensor with id {i}")
            return found
        if t.name in names:
            found.append(f"tensors {names[t.name]} and {i} are both named {t.name!r}")
        names.setdefault(t.name, i)
        if t.dtype not in DTYPE_BYTES or t.placement not in PLACEMENTS:
            found.append(f"{_name(t)} has dtype {t.dtype!r} and placement {t.placement!r}")
    written: dict[int, int] = {}
    known = specs()
    for i, op in enumerate(ops):
        where = f"op {i} ({getattr(op, 'kind', '?')})"
        if op.id != i:
            found.append(f"{where} has id {op.id}")
            continue
        if op.kind not in known:
            found.append(f"{where}: kind {op.kind!r} is not one of {', '.join(sorted(known))}")
        if not 0 <= op.output < len(ts):
            found.append(f"{where} writes tensor {op.output}, which does not exist")
            continue
        out = ts[op.output]
        if op.output in written:
            found.append(f"{where} writes {_name(out)}, which op {written[op.output]} writes too")
        written[op.output] = i
        if out.producer != i:
            found.append(f"{where} writes {_name(out)}, whose producer is {out.producer}")
        for t in op.inputs:
            if not 0 <= t < len(ts):
                found.append(f"{where} reads tensor {t}, which does not exist")
                continue
            producer = ts[t].producer
            if t == op.output:
                found.append(f"cycle: {where} reads its own output {_name(ts[t])}")
            elif producer is not None and producer >= i:
                found.append(f"cycle: {where} reads {_name(ts[t])}, which op {producer} writes after it")
    for t in ts:
        if t.producer is not None and written.get(t.id) != t.producer:
            found.append(f"{_name(t)} names op {t.producer} as its producer, which does not write it")
        if t.alias is not None:
            root = ts[t.alias] if 0 <= t.alias < len(ts) else None
            if root is None or t.alias not in model.states or t.producer is None:
                found.append(f"{_name(t)} writes in place into tensor {t.alias}, which is not a state, or is no op's "
                             "output")
            elif (root.shape, root.dtype, root.placement) != (t.shape, t.dtype, t.placement):
                found.append(f"{_name(t)} writes in place into {_name(root)} of another shape, dtype or placement")
    for s in model.states:
        if not 0 <= s < len(ts) or ts[s].producer is not None:
            found.append(f"state {s} is not an input of the model")
    for o in model.outputs:
        if not 0 <= o < len(ts):
            found.append(f"output {o} is not a tensor")
        elif ts[o].producer is None:
            found.append(f"output {_name(ts[o])} is an input: an output is what an op computes")
    return found
