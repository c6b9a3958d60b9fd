"""The communication examples on GPUs, tiny: each runs its World and its PyTorch twin, both checked against float64
PyTorch, and prints both times. On two GPUs with peer access (the twin: NCCL, one process a GPU), else both ranks on
one GPU (a loopback World; the twin both ranks in one process). Skips without a GPU or PyTorch."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def devices(gpu):
    pytest.importorskip("torch")
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    if count >= 2 and cupy.cuda.runtime.deviceCanAccessPeer(0, 1):
        return "0,1"
    return "0,0"


@pytest.mark.parametrize("name", ["pipeline", "data_parallel", "tensor_parallel"])
def test_each_example_runs_checks_and_times_both_sides(devices, name, capsys):
    import importlib

    example = importlib.import_module(f"examples.{name}")
    assert example.main(["--tiny", "--iterations", "16", "--devices", devices]) == 0
    out = capsys.readouterr().out
    assert "arkdma World:" in out and "per iteration (GPU clock stamps" in out
    assert "largest error" in out and "WRONG" not in out
    assert ("PyTorch + NCCL: eager" if devices == "0,1" else "PyTorch (both ranks in one process, no NCCL): eager") \
        in out
    assert "arkdma / best PyTorch:" in out
