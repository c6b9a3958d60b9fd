"""numeric.cuh's exp2_fma, the exp2 a fused chain computes on the FMA pipes for half of a thread's elements: its
coefficients and steps, read from the header and carried out in float32 as the GPU does (rounding each operation),
against float64. The GPU test of the same function through a model is tests/gpu/test_loop_runtime.py's
test_activation_chains_at_every_place_a_thread_holds."""

from __future__ import annotations

import re

import numpy as np

from ark_runtime import models
from ark_runtime.fusion import fuse
from ark_runtime.kernel.codegen import INCLUDE_DIR, generate
from ark_runtime.plan import build_plan
from ark_runtime.scheduler import DeviceSpec

F32 = np.float32


def _exp2_fma_body() -> str:
    text = (INCLUDE_DIR / "ark" / "numeric.cuh").read_text()
    return text[text.index("float exp2_fma(float x) {"):].split("\n}\n", 1)[0]


def _exp2_fma(x: np.ndarray) -> np.ndarray:
    """The header's steps in float32: clamp, round to the nearest integer by adding 1.5 * 2^23, the polynomial in
    Horner form (fused multiply-adds rounded once, as fmaf), the integer added to the exponent bits."""
    body = _exp2_fma_body()
    lo, hi = (F32(v) for v in re.search(r"fminf\(fmaxf\(x, ([-\d.e]+)f\), ([-\d.e]+)f\)", body).groups())
    assert (lo, hi) == (F32(-127.0), F32(127.99)), (lo, hi)
    coeffs = [F32(c) for c in re.findall(r"([-\d.]+(?:e[-+]?\d+)?)f(?=[);])", body.split("float p =", 1)[1])]
    assert len(coeffs) == 6, coeffs
    magic = F32(12582912.0)
    x = np.minimum(np.maximum(x.astype(F32), lo), hi)
    t = (x + magic).astype(F32)
    f = (x - (t - magic).astype(F32)).astype(F32)
    p = coeffs[0]
    for c in coeffs[1:]:
        p = F32(np.float64(p) * np.float64(f) + np.float64(c))  # fmaf: one rounding
    bits = p.view(np.int32).astype(np.int64) + (t.view(np.int32).astype(np.int64) << 23)
    return (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32)


def test_the_header_holds_a_degree_5_polynomial():
    body = _exp2_fma_body()
    assert len(re.findall(r"fmaf\(p, f, ", body)) == 5, body


def test_exp2_fma_is_within_three_tenths_of_a_millionth_across_the_normal_range():
    x = np.concatenate([np.linspace(-126.0, 127.9, 400_001), np.arange(-126, 128) + 0.5, np.arange(-126, 128) * 1.0])
    x = x.astype(F32)
    got = _exp2_fma(x).astype(np.float64)
    want = np.exp2(x.astype(np.float64))
    rel = np.abs(got / want - 1.0)
    assert rel.max() < 3e-7, f"{rel.max():.3g} at x = {x[rel.argmax()]}"


def test_exp2_fma_clamps_outside_the_range():
    """Below -127 a subnormal (the kernels flush it to 0, as the SFU's exp2 does); above 128 the largest float
    rather than inf: GELU and SiLU take the reciprocal of 1 + it, which is 0 either way once flushed."""
    low = _exp2_fma(np.array([-127.5, -200.0, -1e30], F32))
    assert (low >= 0).all() and (low < 2.0 ** -126).all()
    high = _exp2_fma(np.array([128.0, 200.0, 1e30], F32))
    assert np.isfinite(high).all() and (high > 1e38).all()
    assert (F32(1.0) / (F32(1.0) + high) < 2.0 ** -126).all()


def test_fused_chains_share_their_exponentials_and_single_ops_do_not():
    spec = DeviceSpec(num_sms=132)
    chain = fuse(models.chain(8))
    text = generate(chain, build_plan(chain, spec)).text
    assert "ark::unary_mix<ark::GELU>(" in text and "ark::unary_mix<ark::SILU>(" in text
    one = models.chain(1)  # one op: nothing to fuse, the plain template
    text = generate(one, build_plan(one, spec)).text
    assert "unary_mix" not in text.split("namespace gen {", 1)[1]
