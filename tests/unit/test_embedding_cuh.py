"""embedding.cuh's embedding_rows run on the host (tests/unit/cuda_host/embedding_on_host.cpp, through
cuda_on_host.h's 256 threads) against NumPy: table rows gathered for a tile's rows only, in 16-byte pieces where rows
are whole pieces and both tensors start on 16 bytes, else element by element; an id outside the vocabulary reported
as its row + 1 and its row left unwritten; rows outside the tile untouched. The op's reference and plans are
tested with the models (test_loop_kernel.py, test_hf_decode.py); tests/gpu runs the kernel."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from tests.unit.cuda_host.build import build_on_host

CTYPES = {"fp32": "float", "fp16": "__half", "bf16": "__nv_bfloat16"}
UNWRITTEN = 0xDEAD


def _run(exe, table_bits: np.ndarray, ids, rows: int, r0: int, r1: int, offset: int):
    vocab, cols = table_bits.shape
    text = (f"{vocab} {cols} {rows} {r0} {r1} {offset}\n" + " ".join(map(str, table_bits.ravel().tolist())) + "\n"
            + " ".join(map(str, ids)))
    done = subprocess.run([str(exe)], input=text, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    bad = {int(v) for v in lines[0].split()} - {0}
    return bad, np.array(lines[1:1 + rows * cols], np.int64).reshape(rows, cols)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("offset", [0, 1])  # 1: both tensors off 16 bytes, copied element by element
def test_embedding_cuh_on_the_host_gathers_the_tiles_rows(tmp_path_factory, dtype, offset):
    exe = build_on_host("embedding_on_host.cpp", {"HOST_DTYPE": CTYPES[dtype]}, tmp_path_factory)
    rng = np.random.default_rng(offset)
    width = 32 if dtype == "fp32" else 16
    for cols, rows, (r0, r1) in ((1, 5, (0, 5)), (3, 6, (2, 5)), (8, 4, (0, 4)), (24, 9, (1, 8)), (1000, 3, (0, 3)),
                                 (2048, 1, (0, 1)), (16, 300, (0, 300))):
        vocab = 50
        table = rng.integers(1, 1 << width, (vocab, cols), dtype=np.uint64).astype(np.int64)
        ids = rng.integers(0, vocab, rows)
        bad, out = _run(exe, table, ids, rows, r0, r1, offset)
        assert not bad, (cols, bad)
        want = np.full((rows, cols), UNWRITTEN)
        want[r0:r1] = table[ids[r0:r1]]
        np.testing.assert_array_equal(out, want, f"cols {cols}, rows {r0}:{r1}")


@pytest.mark.parametrize("offset", [0, 1])
def test_an_id_outside_the_vocabulary_is_reported_and_its_row_left_unwritten(tmp_path_factory, offset):
    exe = build_on_host("embedding_on_host.cpp", {"HOST_DTYPE": "__nv_bfloat16"}, tmp_path_factory)
    table = np.arange(1, 10 * 16 + 1).reshape(10, 16)
    for ids, bad_rows in (([3, -1, 4, 10], {1, 3}), ([0, 9, 9, 1 << 30], {3}), ([-(1 << 31), 2, 2, 2], {0})):
        bad, out = _run(exe, table, ids, 4, 0, 4, offset)
        assert bad and bad <= {r + 1 for r in bad_rows}, (ids, bad)
        for r, i in enumerate(ids):
            want = np.full(16, UNWRITTEN) if r in bad_rows else table[i]
            np.testing.assert_array_equal(out[r], want, f"ids {ids}, row {r}")
    bad, _ = _run(exe, table, [5, 5, 5, -3], 4, 0, 3, offset)  # the bad id's row is outside the tile: not read
    assert not bad
