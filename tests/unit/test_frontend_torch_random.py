"""The PyTorch front end on modules Hypothesis draws: MLPs (widths, depth, biases, activation, a LayerNorm, an
nn.RMSNorm or the hand-written RMSNorm pattern, a residual, leading axes) and attention blocks (heads, grouped key
heads, head dimension, sequence, batch, causal or not, SDPA or matmul-softmax-matmul, rotate_half rotary or none).
Each imported model, run in float64, against the module's fp32 forward: within 1e-5 of the output's largest
magnitude."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e '.[torch]')")

import torch.nn.functional as F  # noqa: E402

import ark_runtime  # noqa: E402

nn = torch.nn
TOL = 1e-5
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ACTIVATIONS = {
    "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "cube": lambda x: x.pow(3) / 8,
}


class HandRms(nn.Module):
    """Hugging Face's RMSNorm, written out (the pattern the front end maps to one rmsnorm)."""

    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


class RandomMlp(nn.Module):
    def __init__(self, dims, biases, act: str, norm: str, residual: bool):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=bias) for a, b, bias in zip(dims, dims[1:], biases))
        self.act = ACTIVATIONS[act]
        self.norm = {"none": nn.Identity(), "layernorm": nn.LayerNorm(dims[0]), "rmsnorm": nn.RMSNorm(dims[0]),
                     "hand_rms": HandRms(dims[0])}[norm]
        self.residual = residual and dims[0] == dims[-1]

    def forward(self, x):
        h = self.norm(x)
        for layer in self.layers[:-1]:
            h = self.act(layer(h))
        h = self.layers[-1](h)
        return h + x if self.residual else h


@st.composite
def mlps(draw):
    torch.manual_seed(draw(st.integers(0, 2**16)))  # the weights, drawn reproducibly
    depth = draw(st.integers(1, 3))
    dims = draw(st.lists(st.integers(1, 24), min_size=depth + 1, max_size=depth + 1))
    module = RandomMlp(dims, draw(st.lists(st.booleans(), min_size=depth, max_size=depth)),
                       draw(st.sampled_from(sorted(ACTIVATIONS))),
                       draw(st.sampled_from(["none", "layernorm", "rmsnorm", "hand_rms"])), draw(st.booleans()))
    lead = draw(st.sampled_from([(), (1,), (2,), (1, 3), (2, 3)]))
    return module, lead + (draw(st.integers(1, 9)), dims[0])


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Block(nn.Module):
    def __init__(self, e: int, heads: int, kv_heads: int, d: int, s: int, causal: bool, sdpa: bool, rotary: bool):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, d
        self.causal, self.sdpa, self.rotary = causal, sdpa, rotary
        self.q, self.o = nn.Linear(e, heads * d), nn.Linear(heads * d, e, bias=False)
        self.k, self.v = nn.Linear(e, kv_heads * d), nn.Linear(e, kv_heads * d)
        angles = torch.rand(s, d // 2) * 6
        self.register_buffer("cos", torch.cat((angles, angles), -1).cos())
        self.register_buffer("sin", torch.cat((angles, angles), -1).sin())
        self.register_buffer("mask", torch.full((s, s), float("-inf")).triu(1))

    def _split(self, t, heads):
        b, s, _ = t.shape
        return t.view(b, s, heads, self.d).transpose(1, 2)

    def _repeat(self, t):  # Hugging Face's repeat_kv
        b, hk, s, d = t.shape
        n = self.heads // hk
        return t[:, :, None, :, :].expand(b, hk, n, s, d).reshape(b, hk * n, s, d)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self._split(self.q(x), self.heads), self._split(self.k(x), self.kv_heads), self._split(
            self.v(x), self.kv_heads)
        if self.rotary:
            cos, sin = self.cos[None, None], self.sin[None, None]
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = self._repeat(k), self._repeat(v)
        if self.sdpa:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        else:
            scores = q @ k.transpose(2, 3) / math.sqrt(self.d)
            if self.causal:
                scores = scores + self.mask
            out = scores.softmax(-1) @ v
        return self.o(out.transpose(1, 2).contiguous().reshape(b, s, self.heads * self.d))


@st.composite
def blocks(draw):
    torch.manual_seed(draw(st.integers(0, 2**16)))
    heads = draw(st.sampled_from([1, 2, 4]))
    kv = draw(st.sampled_from([h for h in (1, 2, 4) if heads % h == 0]))
    d, s, b = draw(st.sampled_from([2, 4, 8, 16])), draw(st.integers(1, 12)), draw(st.integers(1, 2))
    e = draw(st.integers(1, 24))
    module = Block(e, heads, kv, d, s, draw(st.booleans()), draw(st.booleans()), draw(st.booleans()))
    return module, (b, s, e)


def _check(module, shape, seed: int) -> None:
    torch.manual_seed(seed)
    module = module.eval()
    x = torch.randn(shape)
    imported = ark_runtime.from_torch(module, (x,))
    with torch.no_grad():
        want = module(x).double().numpy()
    got = imported.reference(x)[0]
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= TOL * max(1.0, np.abs(want).max())


@SETTINGS
@given(mlps(), st.integers(0, 2**16))
def test_random_mlps_match_their_forward(case, seed):
    _check(*case, seed)


@SETTINGS
@given(blocks(), st.integers(0, 2**16))
def test_random_attention_blocks_match_their_forward(case, seed):
    module, shape = case
    _check(module, shape, seed)
