"""tanh and erf-GELU on a GPU (added through the op-spec path): alone, in a fused chain and in a matmul's epilogue,
in each dtype, against the float64 reference; and how close the fast tanh form stays to the exact function."""

from __future__ import annotations

import numpy as np
import pytest

from ark_runtime.model import Model
from tests.gpu.test_loop_runtime import _check

pytestmark = pytest.mark.gpu


def _model(fn: str, dtype: str) -> Model:
    m = Model(f"{fn}-{dtype}")
    x, w = m.input("x", (37, 200), dtype), m.input("w", (200, 136), dtype)
    m.output(m.unary(fn, x), m.unary("neg", m.unary(fn, m.unary("silu", x))), m.unary(fn, m.matmul(x, w)))
    return m


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("fn", ["tanh", "gelu_erf"])
def test_against_the_reference(gpu, fn, dtype):
    _check(_model(fn, dtype), iterations=3)


def test_the_fast_tanh_is_within_a_few_ulps_of_the_exact_one_over_the_whole_range(gpu):
    from ark_runtime.runtime import Runtime

    m = Model("tanh-range")
    x = m.input("x", (1, 8192), "fp32")
    m.output(m.unary("tanh", x))
    grid = np.concatenate([np.linspace(-20, 20, 8190), [np.inf, -np.inf]]).astype(np.float32).reshape(1, -1)
    with Runtime(m) as rt:
        rt.set("x", grid)
        rt.run(1)
        rt.wait()
        got = rt.get(m.tensors[m.outputs[0]].name)
    want = np.tanh(grid.astype(np.float64))
    assert np.abs(got - want).max() < 4e-7 and got[0, -2] == 1.0 and got[0, -1] == -1.0
