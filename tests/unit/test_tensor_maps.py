"""Tensor maps for the wgmma tile's TMA loads (driver/gpu/tensor_maps.py) without a GPU: every rule a map must meet
is refused with a message naming it, and without a CUDA driver the encoder says so instead of crashing. The maps'
bytes are made and used on a GPU: tests/gpu/test_matmul_sm90.py."""

from __future__ import annotations

import re

import pytest

from driver.gpu import libcuda
from driver.gpu.tensor_maps import TENSOR_MAP_BYTES, TensorMapError, check, encode


@pytest.mark.parametrize("args,words", [
    ((0x1008, 64, 64, 64, 64), "16-byte aligned"),
    ((0x1000, 64, 60, 64, 64), "not a multiple of 16"),
    ((0x1000, 64, 64, 257, 64), "at most 256 rows"),
    ((0x1000, 64, 128, 64, 128), "of 128 bytes"),
    ((0x1000, 0, 64, 64, 64), "rows must be a positive int"),
    ((0x1000, 64, 64, 64, True), "box_cols must be a positive int"),
    ((0x1000, 64, 64.0, 64, 64), "cols must be a positive int"),
    ((0x1000, 2 ** 32, 64, 64, 64), "at most 2^32 - 1"),
])
def test_a_map_tma_cannot_use_is_refused_with_the_rule(args, words):
    with pytest.raises(TensorMapError, match=re.escape(words)):
        check(*args)


def test_the_shapes_the_wgmma_tile_asks_for_pass():
    for box_rows in (64, 128):
        check(0x7F00_0000_0000, 8192, 8192, box_rows, 64)
    check(0x100, 17, 8, 64, 64)  # smaller than a box: the copy fills zeros past the matrix
    assert TENSOR_MAP_BYTES == 128


def test_without_a_driver_encoding_says_so(monkeypatch):
    def no_driver():
        raise libcuda.DriverLibraryError("the CUDA driver library (libcuda.so.1) cannot be loaded: test")

    monkeypatch.setattr(libcuda, "_library", no_driver)
    with pytest.raises(TensorMapError, match="libcuda.so.1"):
        encode(0x1000, 64, 64, 64, 64)


def test_the_maps_follow_the_tensor_addresses_64_byte_aligned():
    import numpy as np

    from ark_runtime.kernel.codegen import tensor_maps_at
    from ark_runtime.kernel.program import tensor_words

    assert [tensor_maps_at(n) for n in (0, 1, 8, 9, 17)] == [0, 8, 8, 16, 24]
    m3, m4 = np.arange(128, dtype=np.uint8), np.full(128, 7, np.uint8)
    words = tensor_words([0x1000, 0x2000, 0x3000], {3: m3, 4: m4}, tensor_maps_at(3))
    assert words[:3].tolist() == [0x1000, 0x2000, 0x3000] and not words[3:8].any()
    raw = words.view(np.uint8)
    assert (raw[64 + 3 * 128:64 + 4 * 128] == m3).all() and (raw[64 + 4 * 128:] == m4).all()
    assert not raw[64:64 + 3 * 128].any()  # ops without TMA loads keep zeros
    with pytest.raises(ValueError, match="multiple of 8"):
        tensor_words([1, 2, 3], {}, 4)
    with pytest.raises(ValueError, match="past the 9 addresses"):
        tensor_words(list(range(9)), {}, 8)
    with pytest.raises(ValueError, match="not 128 bytes"):
        tensor_words([1], {0: np.zeros(64, np.uint8)}, 8)
