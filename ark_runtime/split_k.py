"""Matmuls with too few output tiles to fill the SMs, cut along K: what the loop kernel runs instead of the model
as written (after fusion.py).

A matmul of M x K by K x N whose wgmma tiles would fill at most half the SMs (a transformer block's projections at
short sequences, an MLP's down projection at small batch) leaves most SMs idle through all of K; a skinny one
(gemv.cuh, gemv_mma.cuh) whose tiles would be narrower than 128 columns streams its weights slower. `split_k` gives
it S parts (ops/matmul.py's k_splits): the matmul op, with attribute `k_splits`, writes each part's fp32 sums to rows
s * M .. of a new tensor `<name>.parts` (S * M x N, GPU memory), and a `split_sum` op adds the parts in order into the
original output (same name, dtype and place). Every other op, and every tensor a user can bind or read, is as
before; fp32 partial sums keep the accumulation at least as exact as one tile's.
"""

from __future__ import annotations

from ark_runtime.fusion import inputs_of
from ark_runtime.model import Model, Op
from ark_runtime.scheduler import DeviceSpec
from ark_runtime.ops.matmul import k_splits


def splits_of(model: Model, op: Op, device: DeviceSpec) -> int:
    if op.kind != "matmul" or op.attr("k_splits"):
        return 1
    a, b = (model.tensors[i] for i in op.inputs[:2])
    if a.dtype != b.dtype:
        return 1
    return k_splits(a.rows, b.cols, a.cols, a.dtype, device.num_sms, device.wgmma)


def split_k(model: Model, device: DeviceSpec) -> Model:
    """The model with each matmul worth splitting as a split-K matmul and a sum (the model itself when none is)."""
    splits = {op.id: splits_of(model, op, device) for op in model.ops}
    if all(s == 1 for s in splits.values()):
        return model
    out, new_id = inputs_of(model)
    for op in model.ops:
        inputs = tuple(new_id[i] for i in op.inputs)
        res = model.tensors[op.output]
        parts = splits[op.id]
        if parts > 1:  # the parts: A and B only; the sum: the parts, then what the epilogue reads (fusion.py)
            a = model.tensors[op.inputs[0]]
            p = out._tensor(f"{res.name}.parts", (parts * a.rows, res.cols), "fp32", "device", len(out.ops))
            whole = tuple((k, v) for k, v in op.attrs if k != "epilogue")
            out.ops.append(Op(len(out.ops), "matmul", "matmul", inputs[:2], p.id, (*whole, ("k_splits", parts))))
            epilogue = tuple((k, v) for k, v in op.attrs if k == "epilogue")
            inputs, kind, fn, attrs = (p.id, *inputs[2:]), "split_sum", "split_sum", (("k_splits", parts), *epilogue)
        else:
            kind, fn, attrs = op.kind, op.fn, op.attrs
        t = out._tensor(res.name, res.shape, res.dtype, res.placement, len(out.ops),
                        None if res.alias is None else new_id[res.alias])
        out.ops.append(Op(len(out.ops), kind, fn, inputs, t.id, attrs))
        new_id[res.id] = t.id
    out.outputs = [new_id[t] for t in model.outputs]
    return out
