"""A World with one process per GPU (WorldProcess): two processes, each its own rank on its own GPU, memory handles
exchanged through a torch.distributed FileStore, each rank's output against NumPy. Needs two GPUs with peer access."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def two_gpus(gpu):
    import cupy

    if cupy.cuda.runtime.getDeviceCount() < 2 or not cupy.cuda.runtime.deviceCanAccessPeer(0, 1):
        pytest.skip("needs two GPUs that reach each other's memory")
    pytest.importorskip("torch.distributed", reason="the `torch` extra (PyTorch) is not installed")


@pytest.mark.parametrize("steps", ["matmul,all_reduce_one,ring", "pairs,gather_scatter,all_reduce_two"])
def test_two_processes_run_their_ranks_to_numpy(two_gpus, tmp_path, steps):
    store = tmp_path / "store"
    children = [subprocess.Popen([sys.executable, "-m", "tests.gpu.world_process_child", str(r), str(store), steps],
                                 cwd=ROOT, stderr=subprocess.PIPE, text=True) for r in range(2)]
    results = []
    for c in children:
        try:
            _, err = c.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for k in children:
                k.kill()
            pytest.fail("a rank's process did not finish within 300 s")
        results.append((c.returncode, err))
    assert all(code == 0 for code, _ in results), "\n".join(err for _, err in results)
