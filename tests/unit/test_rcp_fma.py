"""numeric.cuh's rcp_fma, the reciprocal a fused chain computes on the FMA pipes for some of a thread's elements (GELU
and SiLU take 1 / (1 + 2^y)): its first guess, clamp and steps, read from the header and carried out in float32 as
the GPU does (each fmaf rounded once), against float64. The GPU test of the same function through a model is
tests/gpu/test_loop_runtime.py's test_activation_chains_at_every_place_a_thread_holds."""

from __future__ import annotations

import re

import numpy as np

from ark_runtime import models
from ark_runtime.fusion import fuse
from ark_runtime.kernel.codegen import INCLUDE_DIR, generate
from ark_runtime.plan import build_plan
from ark_runtime.scheduler import DeviceSpec

F32 = np.float32


def _header() -> str:
    return (INCLUDE_DIR / "ark" / "numeric.cuh").read_text()


def _body() -> str:
    text = _header()
    return text[text.index("float rcp_fma(float d) {"):].split("\n}\n", 1)[0]


def _fma(a, b, c) -> np.ndarray:
    """fmaf: the float32 product exact in float64 (48 bits), one rounding to float32 after the add."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(F32)


def _rcp_fma(d: np.ndarray) -> np.ndarray:
    """The header's steps: clamp, the guess from the bits, then a cubic and a Newton step, each as its fmaf lines."""
    body = _body()
    hi = float.fromhex(re.search(r"fminf\(d, (0x1p\d+)f\)", body).group(1))
    magic = int(re.search(r"__int_as_float\((0x[0-9A-Fa-f]+) - __float_as_int\(d\)\)", body).group(1), 16)
    steps = [line.strip() for line in body.splitlines() if "fmaf" in line]
    assert steps == ["float e = fmaf(-d, r, 1.0f);", "r = fmaf(r, fmaf(e, e, e), r);", "e = fmaf(-d, r, 1.0f);",
                     "return fmaf(r, e, r);"], steps
    d = np.minimum(d.astype(F32), F32(hi))
    r = ((np.int64(magic) - d.view(np.int32).astype(np.int64)) & 0xFFFFFFFF).astype(np.uint32).view(F32)
    e = _fma(-d, r, F32(1))
    r = _fma(r, _fma(e, e, e), r)
    e = _fma(-d, r, F32(1))
    return _fma(r, e, r)


def test_rcp_fma_is_within_a_float_ulp_and_a_half_from_one_to_the_clamp():
    mantissas = np.arange(0, 1 << 23, 3, dtype=np.uint32)
    d = np.concatenate([((np.uint32(127 + k) << 23) | mantissas[k::7]).view(F32) for k in range(0, 100, 3)])
    d = np.concatenate([d, np.array([1.0, 1.5, 2.0, 3.0, 1e10, 2.0 ** 99], F32)])
    got = _rcp_fma(d).astype(np.float64)
    rel = np.abs(got * d.astype(np.float64) - 1.0)
    assert rel.max() < 8e-8, f"{rel.max():.3g} at d = {d[rel.argmax()]}"


def test_rcp_fma_of_huge_and_infinite_sums_is_the_clamps_reciprocal():
    """1 + 2^y overflows to inf (the SFU's exp2 saturates): the clamp gives 2^-100, which GELU (x - x r) and SiLU
    (x r) turn into x and into a value below float's precision of x, as 1/inf would."""
    got = _rcp_fma(np.array([2.0 ** 100, 3.4e38, np.inf], F32))
    assert (np.abs(got.astype(np.float64) * 2.0 ** 100 - 1.0) < 8e-8).all(), got
    x = np.array([1.0, 88.0, 1e4, 3e38], F32)
    assert ((x - x * got[2]).astype(F32) == x).all()


def test_fused_chains_share_their_reciprocals_and_single_ops_do_not():
    spec = DeviceSpec(num_sms=132)
    chain = fuse(models.chain(8))
    text = generate(chain, build_plan(chain, spec)).text
    assert "ark::unary_mix<ark::GELU>(" in text and "ark::unary_mix<ark::SILU>(" in text
    one = models.chain(1)
    assert "unary_mix" not in generate(one, build_plan(one, spec)).text.split("namespace gen {", 1)[1]
