"""1 MiB device->pinned host in a gated device graph: one memcpy node, or two (or four) side by side."""
import sys
import numpy as np
import cupy
from cupy.cuda import runtime, driver
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))  # the checkout
from driver.gpu import compile
from driver.gpu.device_graphs import capture

SRC = r"""
#include <cuda_runtime.h>
extern "C" __global__ void gate(const unsigned long long* gate, const unsigned long long* ticket) {
  const unsigned long long n = *(volatile const unsigned long long*)ticket;
  while (*(volatile const unsigned long long*)gate < n) {}
}
__device__ unsigned long long now() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
extern "C" __global__ void drive(const unsigned long long* graphs, unsigned long long* words, unsigned long long* stamps, int reps) {
  volatile unsigned long long* w = words;
  if (threadIdx.x || blockIdx.x) return;
  w[2 + 1 % 4] = 1; cudaGraphLaunch((cudaGraphExec_t)graphs[1 % 4], cudaStreamGraphFireAndForget);
  for (int r = 1; r <= reps; ++r) {
    const unsigned long long s = now();
    while (now() - s < 30000) {}
    const unsigned long long t0 = now();
    __threadfence_system();
    w[1] = r;
    if (r < reps) { w[2 + (r + 1) % 4] = r + 1; cudaGraphLaunch((cudaGraphExec_t)graphs[(r + 1) % 4], cudaStreamGraphFireAndForget); }
    while (w[0] < (unsigned long long)r) {}
    stamps[r] = now() - t0;
  }
}
"""
mod = compile.load(SRC, rdc=True)
gate_fn, drive_fn = mod.get_function("gate"), mod.get_function("drive")
stream = cupy.cuda.Stream(non_blocking=True)
side = [cupy.cuda.Stream(non_blocking=True) for _ in range(3)]
nbytes = 1 << 20
src = cupy.arange(nbytes // 4, dtype=cupy.float32)
host = cupy.cuda.alloc_pinned_memory(nbytes)
for parts in (1, 2, 4, 1, 2, 4):
    words = cupy.zeros(16, cupy.uint64)
    graphs, keep = [], []
    for k in range(4):
        def record(k=k):
            ga = [np.array([words.data.ptr + 8], np.uint64), np.array([words.data.ptr + 8 * (2 + k)], np.uint64)]
            gp = np.array([a.ctypes.data for a in ga], np.uintp)
            keep.append((ga, gp))
            driver.launchKernel(gate_fn.kernel.ptr, 1, 1, 1, 32, 1, 1, 0, stream.ptr, gp.ctypes.data, 0)
            step = nbytes // parts
            fork = cupy.cuda.Event(disable_timing=True)
            fork.record(stream)
            for i in range(1, parts):
                side[i - 1].wait_event(fork)
                runtime.memcpyAsync(host.ptr + i * step, src.data.ptr + i * step, step, 2, side[i - 1].ptr)
            runtime.memcpyAsync(host.ptr, src.data.ptr, step, 2, stream.ptr)
            for i in range(1, parts):
                join = cupy.cuda.Event(disable_timing=True)
                join.record(side[i - 1])
                stream.wait_event(join)
            runtime.memcpyAsync(words.data.ptr, words.data.ptr + 8 * (2 + k), 8, 3, stream.ptr)
        graphs.append(capture(stream, record, f"copy {k}"))
    handles = cupy.asarray(np.array([g.handle for g in graphs], np.uint64))
    stamps = cupy.zeros(101, cupy.uint64)
    args = [np.array([handles.data.ptr], np.uint64), np.array([words.data.ptr], np.uint64),
            np.array([stamps.data.ptr], np.uint64), np.array([100], np.int32)]
    params = np.array([a.ctypes.data for a in args], np.uintp)
    g = capture(stream, lambda: driver.launchKernel(drive_fn.kernel.ptr, 1, 1, 1, 32, 1, 1, 0, stream.ptr, params.ctypes.data, 0), "drive")
    g.launch(stream)
    stream.synchronize()
    t = stamps.get()[11:] / 1e3
    ok = np.frombuffer(host, np.float32, nbytes // 4)[-1] == nbytes // 4 - 1
    print(f"1 MiB in {parts} memcpy node(s): median {np.median(t):.2f} us p10 {np.percentile(t, 10):.2f} p90 {np.percentile(t, 90):.2f} ({nbytes / np.median(t) / 1e3:.1f} GB/s) ok {ok}", flush=True)
    g.close()
    for gg in graphs:
        gg.close()
