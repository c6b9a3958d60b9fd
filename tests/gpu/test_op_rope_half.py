"""RoPE per head and in the rotate-half (Hugging Face) convention on a GPU, in each dtype, against the float64
reference: heads of 48 and 64 columns over sequences of 37 (no tile multiple), and rows of 4,224 columns cut into
tiles that end inside a head."""

from __future__ import annotations

import pytest

from ark_runtime.model import Model
from tests.gpu.test_loop_runtime import _check

pytestmark = pytest.mark.gpu


def _model(dtype: str) -> Model:
    m = Model(f"rope-heads-{dtype}")
    ys = []
    for shape, hd in (((2, 37, 3 * 48), 48), ((37, 4 * 64), 64), ((1, 5, 4224), 96), ((3, 7, 10), 10)):
        s = shape[-2]
        x = m.input(f"x{hd}", shape, dtype)
        cos, sin = m.input(f"cos{hd}", (s, hd // 2), dtype), m.input(f"sin{hd}", (s, hd // 2), dtype)
        ys += [m.rope(x, cos, sin, style="half", head_dim=hd), m.rope(x, cos, sin, head_dim=hd)]
    x = m.input("one_head", (2, 37, 64), dtype)
    ys.append(m.rope(x, m.input("cos_one", (37, 32), dtype), m.input("sin_one", (37, 32), dtype), style="half"))
    m.output(*ys)
    return m


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_against_the_reference(gpu, dtype):
    _check(_model(dtype), iterations=2)
