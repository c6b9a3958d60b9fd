"""The argmax op on a GPU, exactly against NumPy's rule in every dtype and for every team size: normal values, many
equal maxima (the lowest index), NaN (the first one), signed zeros (equal), subnormals (compared, not flushed); and
greedy decoding (argmax of a tied embedding's logits fed back into the embedding) on integer-valued weights, where the
logits are exact."""

from __future__ import annotations

import numpy as np
import pytest

from ark_runtime.model import Model
from tests.gpu.exact import check_exact

pytestmark = pytest.mark.gpu

SHAPES = ((37, 200), (300, 7), (5, 4100), (1, 128000), (64, 1000), (3, 512), (2, 3, 33))
TINY = {"fp32": 1e-40, "fp16": 1e-7, "bf16": 1e-40}  # subnormal in each


def _values(kind: str, dtype: str, shape, rng) -> np.ndarray:
    if kind == "ties":
        return rng.integers(-2, 3, shape).astype(float)
    x = rng.standard_normal(shape)
    if kind == "nan":
        x[rng.random(shape) < 0.01] = np.nan
    elif kind == "zeros":
        x = np.where(rng.random(shape) < 0.5, -0.0, 0.0) - (rng.random(shape) < 0.5)
    elif kind == "subnormal":
        x = rng.integers(1, 100, shape) * TINY[dtype] * np.where(rng.random(shape) < 0.3, -1, 1)
    return x


@pytest.mark.parametrize("kind", ["normal", "ties", "nan", "zeros", "subnormal"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_numpys_rule_exactly(gpu, dtype, kind):
    rng = np.random.default_rng(0)
    m = Model(f"argmax-{dtype}-{kind}")
    inputs = {}
    for i, shape in enumerate(SHAPES):
        x = m.input(f"x{i}", shape, dtype)
        inputs[x.name] = _values(kind, dtype, shape, rng)
        m.output(m.argmax(x))
    check_exact(m, inputs)


def test_greedy_decoding(gpu):
    m = Model("greedy")
    table, h = m.input("table", (1000, 64)), m.input("h", (7, 64))
    ids = m.argmax(m.matmul(h, m.transpose(table)))
    m.output(m.embedding(table, ids), m.cast(ids, "fp32"))
    rng = np.random.default_rng(0)  # small integers: every product and sum exact in fp32
    check_exact(m, {"table": rng.integers(-3, 4, (1000, 64)).astype(float),
                    "h": rng.integers(-3, 4, (7, 64)).astype(float)})
