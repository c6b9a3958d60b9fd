"""Grouped-query attention and queries after a prefix of keys on a GPU, each dtype, against the float64 reference."""

from __future__ import annotations

import pytest

from tests.gpu.test_loop_runtime import _check
from tests.unit.test_attention_gqa import _model

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize(("batch", "sq", "skv", "heads", "kv_heads", "d", "causal"), [
    (1, 37, 37, 8, 2, 64, True), (2, 5, 70, 4, 1, 32, True), (1, 1, 129, 8, 8, 64, True),
    (3, 17, 40, 6, 3, 8, False), (1, 128, 384, 32, 8, 64, True),
])
def test_against_the_reference(gpu, dtype, batch, sq, skv, heads, kv_heads, d, causal):
    _check(_model(dtype, batch, sq, skv, heads, kv_heads, d, causal), iterations=2)
