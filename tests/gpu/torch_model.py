"""A model run op by op in PyTorch, each op as PyTorch's own call in the tensors' dtype: the independent
implementation the loop kernel's results are checked against (beside the float64 reference of
`ark_runtime.reference`). Only the ops a model is written with (`Model`'s API); fused and split ops exist only in
the Runtime's rewrite of it."""

from __future__ import annotations

import numpy as np

from ark_runtime.model import Model, Op


def torch_dtype(torch, dtype: str):
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "int32": torch.int32}[dtype]


def _attention(torch, q, k, v, heads: int, causal: bool):
    """[..., S, heads * D] in and out; PyTorch's scaled_dot_product_attention per head (scale 1/sqrt(D))."""
    s, e = q.shape[-2], q.shape[-1]
    d = e // heads

    def split(t):
        return t.reshape(-1, s, heads, d).transpose(1, 2)

    out = torch.nn.functional.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=causal)
    return out.transpose(1, 2).reshape(q.shape)


def _rope(torch, x, cos, sin, style: str = "interleaved", head_dim: int | None = None):
    """Each head's columns 2j and 2j + 1 (style "half": j and j + D/2, as transformers' rotate_half) turned together
    by cos and sin[..., j]."""
    hd = x.shape[-1] if head_dim is None else head_dim
    xh = x.unflatten(-1, (x.shape[-1] // hd, hd))  # [..., S, heads, D]
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    if style == "half":
        x1, x2 = xh[..., :hd // 2], xh[..., hd // 2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    x1, x2 = xh[..., 0::2], xh[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-3)


def apply(torch, op: Op, args: list):
    f = torch.nn.functional
    if op.kind == "unary":
        return {"gelu": lambda x: f.gelu(x, approximate="tanh"), "silu": f.silu, "relu": torch.relu,
                "exp": torch.exp, "neg": torch.neg, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
                "identity": lambda x: x.clone()}[op.fn](args[0])
    if op.kind == "binary":
        return {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
                "max": torch.maximum}[op.fn](args[0], args[1])
    if op.kind == "reduce":
        x = args[0]
        return {"sum": lambda: x.sum(-1, keepdim=True), "max": lambda: x.amax(-1, keepdim=True),
                "mean": lambda: x.mean(-1, keepdim=True)}[op.fn]()
    if op.kind == "softmax":
        return torch.softmax(args[0], dim=-1)
    if op.kind == "layernorm":
        x, w, b = args
        return f.layer_norm(x, (x.shape[-1],), w, b, op.attr("eps"))
    if op.kind == "rmsnorm":
        x, w = args
        return f.rms_norm(x, (x.shape[-1],), w, op.attr("eps"))
    if op.kind == "matmul":
        return args[0] @ args[1]
    if op.kind == "attention":
        return _attention(torch, *args, heads=op.attr("heads"), causal=op.attr("causal", True))
    if op.kind == "rope":
        return _rope(torch, *args, style=op.attr("style", "interleaved"), head_dim=op.attr("head_dim"))
    if op.kind == "embedding":
        table, ids = args
        return table[ids.long()]
    if op.kind == "copy":
        return args[0].clone()
    if op.kind == "cast":
        return args[0].to(torch_dtype(torch, op.attr("dtype")))
    if op.kind == "transpose":
        return args[0].transpose(-1, -2).contiguous()
    if op.kind == "argmax":
        return torch.argmax(args[0], dim=-1, keepdim=True).to(torch.int32)
    if op.kind == "sample":  # no PyTorch call draws Philox's numbers: the NumPy sampler on PyTorch's values
        from ark_runtime.ops.sample import sample_rows

        x, step = args
        drawn = sample_rows(x.reshape(-1, x.shape[-1]).double().cpu().numpy(), step.reshape(-1).cpu().numpy(),
                            op.attr("seed"), op.attr("temperature"), op.attr("top_k"), op.attr("top_p"))
        return torch.tensor(drawn, dtype=torch.int32, device=x.device).reshape(*x.shape[:-1], 1)
    if op.kind == "slice":
        return args[0][..., op.attr("start"):op.attr("stop")].contiguous()
    if op.kind == "concat":
        return torch.cat(args, dim=-1)
    raise ValueError(f"op {op.id} has kind {op.kind!r}, which a model is not written with")


def run(torch, model: Model, inputs: dict) -> dict:
    """Every tensor of `model` (by id), computed op by op from `inputs` (name -> torch tensor in its dtype)."""
    values = {t.id: inputs[t.name] for t in model.tensors if t.producer is None}
    for op in model.ops:
        out = apply(torch, op, [values[i] for i in op.inputs])
        want = model.tensors[op.output]
        if tuple(out.shape) != want.shape or out.dtype != torch_dtype(torch, want.dtype):
            raise AssertionError(f"op {op.id} ({op.kind}) gave {tuple(out.shape)} {out.dtype}; the model says "
                                 f"{want.shape} {want.dtype}")
        values[op.output] = out
    return values


def inputs_for(torch, model: Model, values: dict, device: str = "cuda") -> dict:
    """`values` (name -> NumPy, as the loop tests draw them) as torch tensors in each tensor's dtype."""
    by_name = {t.name: t for t in model.tensors}
    return {name: torch.tensor(v).to(device=device, dtype=torch_dtype(torch, by_name[name].dtype))
            for name, v in values.items()}


def mismatch(got, want, tol: float) -> str | None:
    """Why `got` is not `want` (NumPy, float64) within `tol` of the largest finite |want|, or None. A value that is
    not finite must be so in both, and the same (an overflow to inf, a NaN)."""
    if got.shape != want.shape:
        return f"shape {got.shape} against {want.shape}"
    finite = np.isfinite(got) & np.isfinite(want)
    odd = ~finite & ~((got == want) | (np.isnan(got) & np.isnan(want)))
    if odd.any():
        at = tuple(int(i) for i in np.argwhere(odd)[0])
        return f"{int(odd.sum())} values finite in one and not the other, first at {at}: {got[at]} against {want[at]}"
    if not finite.any():
        return None
    scale = max(1.0, float(np.abs(want[finite]).max()))
    diff = np.where(finite, np.abs(got - want), 0.0) / scale
    if diff.max() > tol:
        at = tuple(int(i) for i in np.unravel_index(int(diff.argmax()), diff.shape))
        return (f"off by {diff.max():.3g} of the scale {scale:.3g} (allowed {tol:g}) at {at}: {got[at]:.6g} against "
                f"{want[at]:.6g}; {int((diff > tol).sum())} of {diff.size} off")
    return None
