"""The slice op on a GPU, bit for bit against the float64 reference in every dtype: narrow and wide slices of rows
that are no tile multiple, of rows cut into several tiles, and of a 3-D tensor."""

from __future__ import annotations

import numpy as np
import pytest

from ark_runtime.model import Model
from tests.gpu.exact import check_exact

pytestmark = pytest.mark.gpu

CASES = (((37, 200), 0, 1), ((37, 200), 13, 187), ((37, 200), 199, 200), ((3, 20000), 1001, 19999),
         ((2, 7, 33), 5, 33), ((1, 1), 0, 1))


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16", "int32"])
def test_every_slice_is_exact(gpu, dtype):
    rng = np.random.default_rng(0)
    m = Model(f"slice-{dtype}")
    inputs = {}
    for i, (shape, start, stop) in enumerate(CASES):
        x = m.input(f"x{i}", shape, dtype)
        inputs[x.name] = (rng.integers(-(2 ** 31), 2 ** 31, shape, dtype=np.int64).astype(np.int32)
                          if dtype == "int32" else rng.standard_normal(shape))
        m.output(m.slice(x, start, stop))
    check_exact(m, inputs)
