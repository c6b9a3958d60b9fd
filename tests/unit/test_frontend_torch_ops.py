"""Each row of docs/runtime.md's "From PyTorch" table on a small module: imported, run in float64, against the
module's fp32 forward (within 1e-5 of the output's largest magnitude), with the model ops the table says among its
ops."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e '.[torch]')")

import torch.nn.functional as F  # noqa: E402

import ark_runtime  # noqa: E402

nn = torch.nn


class Case(nn.Module):
    def __init__(self, fn, d: int = 12):
        super().__init__()
        self.fn = fn
        self.proj = nn.Linear(d, d)
        self.w = nn.Parameter(torch.randn(d))
        self.register_buffer("c", torch.randn(5, d))

    def forward(self, x):
        return self.fn(self, self.proj(x))


CASES = {
    "add_alpha": (lambda m, h: torch.add(h, m.c, alpha=0.5), {"binary"}),
    "rsub": (lambda m, h: 1.5 - h, {"binary"}),
    "sub_constant": (lambda m, h: m.c - h * 2, {"binary"}),
    "div": (lambda m, h: h / (m.w.abs() + 1), {"binary"}),
    "clamp_min": (lambda m, h: torch.clamp_min(h, 0.1), {"binary"}),
    "maximum": (lambda m, h: torch.maximum(h, m.c), {"binary"}),
    "reciprocal": (lambda m, h: torch.reciprocal(h.exp()), {"unary", "binary"}),
    "sigmoid": (lambda m, h: torch.sigmoid(h), {"unary", "binary"}),
    "gelu_tanh": (lambda m, h: F.gelu(h, approximate="tanh"), {"unary"}),
    "pow": (lambda m, h: h.pow(3) + h.exp().pow(0.5) + h.exp().pow(-0.5) + (h.exp() + 1).pow(-1), {"unary", "binary"}),
    "reductions": (lambda m, h: h.sum(-1, keepdim=True) + h.amax(-1, keepdim=True) * h.mean(-1, keepdim=True),
                   {"reduce", "binary"}),
    "reduction_dropping_the_axis": (lambda m, h: h.mean(-1), {"reduce"}),
    "softmax": (lambda m, h: h.softmax(-1), {"softmax"}),
    "layer_norm_without_affine": (lambda m, h: F.layer_norm(h, (12,)), {"layernorm"}),
    "rms_norm": (lambda m, h: F.rms_norm(h, (12,), m.w, 1e-5), {"rmsnorm"}),
    "split_and_matmul": (lambda m, h: h.split(6, dim=-1)[1].contiguous() @ m.c[:, :6].T, {"matmul"}),
    "chunk_rows": (lambda m, h: h.chunk(2, dim=-1)[0] * 2, {"matmul", "binary"}),
    "permute_back": (lambda m, h: h.view(5, 3, 4).permute(1, 0, 2).permute(1, 0, 2).reshape(5, 12).tanh(), {"unary"}),
    "type_as": (lambda m, h: h.type_as(m.w).relu(), {"unary"}),
    "scale_folded_into_attention": (
        lambda m, h: F.scaled_dot_product_attention(*(h.view(1, 5, 3, 4).transpose(1, 2),) * 3, scale=0.3)
        .transpose(1, 2).reshape(5, 12), {"attention", "binary"}),
    "attention_by_hand": (
        lambda m, h: (lambda q: ((q @ q.transpose(-1, -2)) / math.sqrt(4)).softmax(-1) @ q)(
            h.view(5, 3, 4).transpose(0, 1)).transpose(0, 1).reshape(5, 12), {"attention"}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_mapped_op_computes_what_pytorch_does(name):
    fn, kinds = CASES[name]
    torch.manual_seed(0)
    module, x = Case(fn).eval(), torch.randn(5, 12)
    imported = ark_runtime.from_torch(module, (x,))
    assert kinds <= {op.kind for op in imported.model.ops}
    with torch.no_grad():
        want = module(x).double().numpy()
    got = imported.reference(x)[0]
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max())
