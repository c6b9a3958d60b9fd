"""The cast op on a GPU: every pair of dtypes (fp32, fp16, bf16, and int32 ids to each), at shapes that are no tile
multiple and rows cut into several tiles, equal to the float64 reference bit for bit: the GPU's conversions round to
nearest even once, overflow to inf, keep NaN and signed zeros, and round an int32 once."""

from __future__ import annotations

import numpy as np
import pytest

from ark_runtime.model import Model
from tests.gpu.exact import check_exact
from tests.gpu.test_loop_runtime import _check

pytestmark = pytest.mark.gpu

FLOATS = ("fp32", "fp16", "bf16")
PAIRS = [(a, b) for a in (*FLOATS, "int32") for b in FLOATS if a != b]
SHAPES = ((37, 200), (3, 8292), (2, 3, 5))


def _values(dtype: str, shape, rng, subnormals: bool = False) -> np.ndarray:
    if dtype == "int32":
        special = [2 ** 24 + 2 ** 16 + 1, 2 ** 24 + 1, 2 ** 31 - 1, -(2 ** 31), 65519, 65520, 0, -1]
        x = rng.integers(-(2 ** 31), 2 ** 31, shape, dtype=np.int64)
        x.flat[:min(x.size, len(special))] = special[:x.size]
        return x.astype(np.int32)
    scale = {"fp32": 1e5, "fp16": 1e3, "bf16": 1e5}[dtype]
    x = rng.standard_normal(shape) * np.exp(rng.uniform(-8, np.log(scale), shape))
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, -70000.0, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8,
               1 + 2.0 ** -11, 3e38]
    if subnormals:
        special += [1e-40, -3e-42, 1e-45, 6e-8, 3e-8, -2.0 ** -24, 2.0 ** -25, 1e-39]
    if dtype == "fp16":
        special = [v for v in special if not abs(v) > 65504 or np.isinf(v)]
    x.flat[:min(x.size, len(special))] = special[:x.size]
    return x


@pytest.mark.parametrize("src, dst", PAIRS)
def test_each_pair_is_exact(gpu, src, dst):
    rng = np.random.default_rng(0)
    m = Model(f"cast-{src}-{dst}")
    inputs = {}
    for i, shape in enumerate(SHAPES):
        x = m.input(f"x{i}", shape, src)
        inputs[x.name] = _values(src, shape, rng)
        m.output(m.cast(x, dst))
    check_exact(m, inputs)


@pytest.mark.parametrize("src, dst", [(a, b) for a in FLOATS for b in FLOATS if a != b])
def test_subnormals_are_rounded_not_flushed(gpu, src, dst):
    """The kernels compile with -ftz; the conversions (cvt.rn without .ftz) must not flush."""
    m = Model(f"cast-subnormal-{src}-{dst}")
    x = m.input("x", (1, 20), src)
    m.output(m.cast(x, dst))
    check_exact(m, {"x": _values(src, (1, 20), np.random.default_rng(1), subnormals=True)})


def test_a_cast_between_two_fused_chains(gpu):
    """Not exact (the chains' functions are the kernels' fast forms): within the tolerance of the last dtype."""
    m = Model("cast-chain")
    x = m.input("x", (37, 200), "fp32")
    y = m.unary("relu", m.unary("gelu", m.cast(m.unary("neg", m.unary("exp", x)), "bf16")))
    m.output(m.cast(y, "fp16"))
    _check(m)
