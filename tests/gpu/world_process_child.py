"""One rank of tests/gpu/test_world_process.py: runs a World's rank through WorldProcess with a FileStore, checks its
output against NumPy, and exits 0 (1 with the error on stderr)."""

from __future__ import annotations

import os
import sys
import traceback

import numpy as np


def main(rank: int, store_path: str, steps: str) -> int:
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        os.environ[k] = v
    import torch.distributed as dist

    from ark_runtime.runtime.world_process import WorldProcess
    from ark_runtime.world import World
    from tests.unit.test_world import _inputs, numpy_run, program

    store = dist.FileStore(store_path, 2)
    plan = steps.split(",")
    w = World(program(plan, 2, 64, 256))
    inputs = _inputs(2, 64, 256, 3)
    try:
        with WorldProcess(w, rank, device=rank, store=store) as wp:
            for name, value in inputs[rank].items():
                wp.set(name, value)
            wp.run(3)
            wp.wait()
            m = w.models[rank]
            got = wp.get(m.tensors[m.outputs[0]].name)
        want = numpy_run(plan, inputs)[rank]
        err = float(np.abs(got - want).max() / max(1.0, np.abs(want).max()))
        if err > 4e-4:
            print(f"rank {rank}: error {err}", file=sys.stderr)
            return 1
        return 0
    except Exception:  # noqa: BLE001 - the parent reads the child's stderr
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), sys.argv[2], sys.argv[3]))
