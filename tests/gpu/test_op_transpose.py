"""The transpose op on a GPU, bit for bit against the float64 reference in every dtype: small matrices several to a
tile, blocks of large ones whose edges are no multiple of the 32 x 32 shared-memory block, a batch of matrices cut
into blocks; and a tied embedding's logits (h @ table^T) within the dtype's tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from ark_runtime.model import Model
from tests.gpu.exact import check_exact
from tests.gpu.test_loop_runtime import _check

pytestmark = pytest.mark.gpu

SHAPES = ((37, 200), (100, 3, 5), (2, 150, 2100), (4099, 33), (1, 1))


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16", "int32"])
def test_every_shape_is_exact(gpu, dtype):
    rng = np.random.default_rng(0)
    m = Model(f"transpose-{dtype}")
    inputs = {}
    for i, shape in enumerate(SHAPES):
        x = m.input(f"x{i}", shape, dtype)
        inputs[x.name] = (rng.integers(-(2 ** 31), 2 ** 31, shape, dtype=np.int64).astype(np.int32)
                          if dtype == "int32" else rng.standard_normal(shape))
        m.output(m.transpose(x))
    check_exact(m, inputs)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_tied_embedding_logits(gpu, dtype):
    m = Model(f"tied-{dtype}")
    table, ids = m.input("table", (1000, 128), dtype), m.input("ids", (2, 9), "int32")
    h = m.rmsnorm(m.embedding(table, ids), m.input("g", (128,), dtype))
    m.output(m.matmul(h, m.transpose(table)))
    _check(m)
