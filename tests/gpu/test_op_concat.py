"""The concat op on a GPU, bit for bit against the float64 reference in every dtype: narrow and wide parts, rows that
are no tile multiple, rows cut into tiles across the seam, a 3-D pair, and a tensor joined to itself."""

from __future__ import annotations

import numpy as np
import pytest

from ark_runtime.model import Model
from tests.gpu.exact import check_exact

pytestmark = pytest.mark.gpu

CASES = (((37,), 200, 1), ((37,), 1, 200), ((3,), 9000, 11000), ((2, 7), 33, 31), ((1,), 1, 1))


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16", "int32"])
def test_every_concat_is_exact(gpu, dtype):
    rng = np.random.default_rng(0)

    def values(shape):
        if dtype == "int32":
            return rng.integers(-(2 ** 31), 2 ** 31, shape, dtype=np.int64).astype(np.int32)
        return rng.standard_normal(shape)

    m = Model(f"concat-{dtype}")
    inputs = {}
    for i, (lead, da, db) in enumerate(CASES):
        a, b = m.input(f"a{i}", (*lead, da), dtype), m.input(f"b{i}", (*lead, db), dtype)
        inputs[a.name], inputs[b.name] = values(a.shape), values(b.shape)
        m.output(m.concat(a, b))
    m.output(m.concat(a, a))
    check_exact(m, inputs)
