"""The GPU benches' set-up on a real GPU, at sizes small enough for the test run: every transfer kind of
`arkdma bench interference` moves its bytes and reports success (its set-up once registered pinned memory
the way only engine memory may be, and the bench failed on the GPU machine while every test passed)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from bench.interference import SPAN
from driver.gpu.launch import gpu_unavailable_reason

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def transfers():
    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"needs a CUDA GPU: {reason}")
    from bench.interference import InterferenceConfig, Transfers

    tx = Transfers(InterferenceConfig(budget_s=10.0))
    yield tx
    tx.close()


def _fill(transfers, place: str, value: int) -> None:
    if place == "host":
        ctypes.memset(transfers.host_ptr, value, SPAN)
    else:
        (transfers.peer if place == "peer" else transfers.gpu[place]).fill(value)


def _count(transfers, place: str, value: int) -> int:
    if place == "host":
        view = np.ctypeslib.as_array(ctypes.cast(transfers.host_ptr, ctypes.POINTER(ctypes.c_uint8)), shape=(SPAN,))
        return int(np.count_nonzero(view == value))
    arr = transfers.peer if place == "peer" else transfers.gpu[place]
    return int((arr == value).sum())


def test_every_interference_kind_moves_its_bytes(transfers):
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    kinds = transfers.kinds()
    assert {path for _, path, _ in kinds} == {"engine", "engine-spin", "sm-copy"}
    for value, (kind, path, direction) in enumerate(kinds, start=3):
        src, dst = transfers.places(direction)
        _fill(transfers, src, value)
        _fill(transfers, dst, 0)
        cupy.cuda.runtime.deviceSynchronize()
        nbytes = transfers.bytes_for(path, 1)
        transfers.enqueue(path, direction, nbytes, stream)
        stream.synchronize()
        transfers.check(path)
        assert _count(transfers, dst, value) == min(nbytes, SPAN), f"{kind}: not every byte arrived"
