"""A GPU kernel that offloads its own results: compute, post a copy to host memory, signal, repeat.

No CPU call sits between the steps: the kernel writes descriptors into the engine's submission
window and rings the doorbell itself (device.cuh), on the card or on the software engine.

    ./dev arkdma info                       # which engines can run here
    .venv/bin/python -m examples.offload_from_kernel --steps 8 --floats 1048576
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from driver.abi import Perm
from driver.device import Device
from driver.errors import ArkdmaError

SOURCE = Path(__file__).with_name("offload_kernel.cu")
BLOCKS, THREADS = 8, 256


def open_engine() -> Device:
    """The card when there is one, else the software engine on this GPU."""
    from ark_runtime import engines

    for name in ("card", "software-cuda"):
        prov = engines.provider(name)
        if prov.unavailable_reason() is None:
            return Device(prov.open())
    reasons = "; ".join(f"{n}: {engines.provider(n).unavailable_reason()}" for n in ("card", "software-cuda"))
    raise ArkdmaError(f"this example needs a GPU-writable queue ({reasons})")


def run(steps: int, floats: int) -> dict:
    import cupy

    from driver.gpu import compile
    from driver.gpu.arrays import register_array
    from driver.gpu.launch import finish, launch, require_gpu
    from driver.abi import DeviceCode
    from driver.gpu.queue import GpuQueue

    require_gpu()
    with open_engine() as dev:
        act = cupy.zeros(floats, dtype=cupy.float32)
        host = dev.alloc(steps * floats * 4, "host")
        flag = dev.alloc(8, "host")
        r_act = register_array(dev, act, perms=Perm.READ)
        r_host, r_flag = dev.register(host, perms=Perm.WRITE), dev.register(flag, perms=Perm.WRITE)
        q = GpuQueue(dev, 0)
        out = cupy.zeros(2, dtype=cupy.uint64)
        sync = cupy.zeros(2, dtype=cupy.uint32)
        fn = compile.kernel(SOURCE.read_text(), "compute_and_offload")
        t0 = time.perf_counter()
        stream = launch(fn, BLOCKS, THREADS, (q.handle(), act, np.uint32(floats), np.uint32(steps),
                                              np.uint16(r_act.id), np.uint16(r_host.id), np.uint16(r_flag.id), out, sync))
        finish(stream, 30.0, [q])
        seconds = time.perf_counter() - t0
        rc, ticket = (int(v) for v in out.get())
        if DeviceCode(rc) != DeviceCode.OK:
            raise ArkdmaError(f"the kernel reported {DeviceCode(rc).name}: {q.status().describe()}")
        got = np.frombuffer(host.read(0, host.size), dtype=np.float32).reshape(steps, floats)
        base = np.arange(floats, dtype=np.float32) * 0.5
        bad = [s for s in range(steps) if not np.array_equal(got[s], base + s)]
        signalled = int.from_bytes(flag.read(0, 8), "little")
        q.close()
        return {"engine": dev.name, "steps": steps, "bytes": steps * floats * 4, "descriptors": ticket,
                "seconds": seconds, "bad_steps": bad, "signal": signalled}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8, help="compute/offload steps (default 8)")
    p.add_argument("--floats", type=int, default=1 << 20, help=f"floats per step, a multiple of {BLOCKS}")
    args = p.parse_args(argv)
    if args.steps <= 0 or args.floats <= 0 or args.floats % BLOCKS:
        p.error(f"--steps must be positive and --floats a positive multiple of {BLOCKS}")
    try:
        r = run(args.steps, args.floats)
    except ArkdmaError as exc:
        print(f"offload_from_kernel: {exc}", file=sys.stderr)
        return 2
    ok = not r["bad_steps"] and r["signal"] == r["steps"]
    print(f"engine {r['engine']}: {r['steps']} steps, {r['bytes'] / 1e6:.1f} MB offloaded by the kernel in "
          f"{r['descriptors']} descriptors, {r['seconds'] * 1e3:.2f} ms from launch to finish (wall clock); "
          f"host flag reads {r['signal']}; " + ("every byte checked" if ok else f"WRONG steps {r['bad_steps']}"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
