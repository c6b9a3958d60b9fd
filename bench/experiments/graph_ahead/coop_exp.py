"""Does a gated copy graph's kernel run beside a persistent kernel launched cooperatively? grid 1 or 132 (all CTAs
stay resident until CTA 0 is done), launched by launchKernel or launchCooperativeKernel inside a graph."""
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
extern "C" __global__ void drive(const unsigned long long* graphs, unsigned long long* words, unsigned long long* stamps, int reps, unsigned long long delay) {
  volatile unsigned long long* w = words;
  if (blockIdx.x != 0) { while (w[8] == 0) {} return; }
  if (threadIdx.x) return;
  for (int r = 1; r <= reps; ++r) {
    w[2 + r % 4] = r; __threadfence();
    cudaGraphLaunch((cudaGraphExec_t)graphs[r % 4], cudaStreamGraphFireAndForget);
    const unsigned long long s = now();
    while (now() - s < delay) {}
    const unsigned long long t0 = now();
    __threadfence_system();
    w[1] = r;
    while (w[0] < (unsigned long long)r) { if (now() - t0 > 50000000ull) { stamps[0] = 999; w[1] = 1ull << 40; w[8] = 1; return; } }
    stamps[r] = now() - t0;
  }
  w[8] = 1;
}
"""
mods = {False: compile.load(SRC, rdc=True), True: compile.load(SRC, rdc=True, cooperative=True)}
stream = cupy.cuda.Stream(non_blocking=True)
nbytes = 8192
src = cupy.arange(nbytes // 4, dtype=cupy.float32)
host = cupy.cuda.alloc_pinned_memory(nbytes)
import itertools
for coopmod, gate_by_driver, delay in itertools.product((False, True), (False, True), (0, 20000)):
    grid, coop, smem, carve = 132, True, 0, None
    gate_fn, drive_fn = mods[coopmod].get_function("gate"), mods[coopmod].get_function("drive")
    drive_fn.max_dynamic_shared_size_bytes = max(smem, 1)
    if carve == "match":
        drive_fn.preferred_shared_memory_carveout = 100
        gate_fn.preferred_shared_memory_carveout = 100
    elif carve == 100:
        drive_fn.preferred_shared_memory_carveout = -1
        gate_fn.preferred_shared_memory_carveout = 100
    else:
        drive_fn.preferred_shared_memory_carveout = -1
        gate_fn.preferred_shared_memory_carveout = -1
    words = cupy.zeros(16, cupy.uint64)
    graphs = []
    keep = []
    for k in range(4):  # graphs captured after the attributes are set
        def record(k=k):
            if gate_by_driver:
                ga = [np.array([words.data.ptr + 8], np.uint64), np.array([words.data.ptr + 8 * (2 + k)], np.uint64)]
                keep.append(ga)
                gp = np.array([a.ctypes.data for a in ga], np.uintp)
                keep.append(gp)
                driver.launchKernel(gate_fn.kernel.ptr, 1, 1, 1, 32, 1, 1, 0, stream.ptr, gp.ctypes.data, 0)
            else:
                with stream:
                    gate_fn((1,), (32,), (words[1:2], words[2 + k:3 + k]))
            runtime.memcpyAsync(host.ptr, src.data.ptr, nbytes, 2, stream.ptr)
            runtime.memcpyAsync(words.data.ptr, words.data.ptr + 8 * (2 + k), 8, 3, stream.ptr)
        graphs.append(capture(stream, record, f"copy {k}"))
    handles = cupy.asarray(np.array([g.handle for g in graphs], np.uint64))
    stamps = cupy.zeros(51, cupy.uint64)
    args = [np.array([handles.data.ptr], np.uint64), np.array([words.data.ptr], np.uint64),
            np.array([stamps.data.ptr], np.uint64), np.array([50], np.int32), np.array([delay], np.uint64)]
    params = np.array([a.ctypes.data for a in args], np.uintp)
    fn = drive_fn.kernel.ptr
    def rec():
        if coop:
            driver.launchCooperativeKernel(fn, grid, 1, 1, 256, 1, 1, smem, stream.ptr, params.ctypes.data)
        else:
            driver.launchKernel(fn, grid, 1, 1, 256, 1, 1, smem, stream.ptr, params.ctypes.data, 0)
    g = capture(stream, rec, "drive")
    g.launch(stream)
    stream.synchronize()
    st = stamps.get()
    print(f"module cooperative {coopmod} gate by driver {gate_by_driver} delay {delay} ns: {'STUCK (gate kernel never ran)' if st[0] == 999 else f'median {np.median(st[11:]) / 1e3:.2f} us'}", flush=True)
    g.close()
    for gg in graphs:
        gg.close()
