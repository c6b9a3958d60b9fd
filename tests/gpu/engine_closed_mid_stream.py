"""Run by tests/gpu/test_device_api.py in a process of its own: a kernel streams 1 MiB copies through the
software engine and the engine is closed under it (thread stopped, its queue memory and buffers freed).
Prints one JSON line: what the kernel returned, its status record, how long close() and the kernel took,
and any CUDA error (a CUDA error would poison a test process's context, hence the separate process)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from driver.abi import Perm
from driver.device import Device
from driver.gpu import compile
from driver.gpu.launch import finish, launch
from driver.gpu.queue import GpuQueue
from host.engine import SoftwareEngine

MiB = 1 << 20
COUNT = 6000
BUDGET_S = 0.3


def main() -> dict:
    import cupy

    module = compile.load(Path(__file__).with_name("device_api_kernels.cu").read_text())
    dev = Device(SoftwareEngine("cuda", num_queues=8, slots=64))
    src, dst = dev.alloc(MiB, "device"), dev.alloc(MiB, "host")
    rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
    q = GpuQueue(dev, 0, budget_s=BUDGET_S)
    out = cupy.zeros(4, dtype=cupy.uint64)
    u16, u32, u64 = np.uint16, np.uint32, np.uint64
    stream = launch(module.get_function("stream_one"), 1, 32,
                    (q.handle(), u16(rs.id), u64(0), u64(0), u16(rd.id), u64(0), u64(0), u32(MiB), u32(COUNT),
                     u32(16), u32(64), out))
    time.sleep(0.02)
    running_at_close = not stream.done
    t0 = time.monotonic()
    dev.close()
    close_s = time.monotonic() - t0
    report = {"running_at_close": running_at_close, "close_s": close_s}
    try:
        report["kernel_s_after_close"] = close_s + finish(stream, 10, [q])
        rc, ticket, _, posted = (int(v) for v in out.get())
        st = q.status()
        report.update(rc=rc, posted=posted, ticket=ticket, code=int(st.code), site=int(st.site),
                      observed=st.observed, waited_ns=st.waited_ns)
    except Exception as exc:  # noqa: BLE001 - the parent test reports whatever broke
        report["error"] = f"{type(exc).__name__}: {exc}"
    return report


if __name__ == "__main__":
    print(json.dumps(main()))
    sys.stdout.flush()
