"""Which property of the loop kernel keeps a device-launched graph's kernel node from starting beside it?"""
import sys, itertools
import numpy as np
import cupy
from cupy.cuda import runtime, driver
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))  # the checkout
from driver.gpu import compile
from driver.gpu.device_graphs import capture

SRC = r"""
#include <cuda_runtime.h>
template <int L>
__device__ void gate_body(const unsigned long long* gate, const unsigned long long* ticket) {
  if (L > 1) {
    volatile int loc[L > 1 ? L : 1];
    for (int i = 0; i < L; ++i) loc[i] = i * (int)threadIdx.x;
    if (loc[(threadIdx.x * 7) % (L > 1 ? L : 1)] == -5) return;
  }
  const unsigned long long n = *(volatile const unsigned long long*)ticket;
  while (*(volatile const unsigned long long*)gate < n) {}
}
extern "C" __global__ void gate(const unsigned long long* g, const unsigned long long* t) { gate_body<0>(g, t); }
extern "C" __global__ void gate64(const unsigned long long* g, const unsigned long long* t) { gate_body<64>(g, t); }
extern "C" __global__ void gate32(const unsigned long long* g, const unsigned long long* t) { gate_body<32>(g, t); }
extern "C" __global__ void gate128(const unsigned long long* g, const unsigned long long* t) { gate_body<128>(g, t); }
__device__ unsigned long long now() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
template <int V>
__device__ void body(const unsigned long long* graphs, unsigned long long* words, unsigned long long* stamps, int reps) {
  volatile unsigned long long* w = words;
  if (V & 4) {  // local memory, as the loop kernel's 176 bytes a thread
    volatile int loc[64];
    for (int i = 0; i < 64; ++i) loc[i] = i * (int)threadIdx.x;
    if (loc[(threadIdx.x * 7) & 63] == -5) stamps[50] = 1;
  }
  if (blockIdx.x != 0) {  // the other CTAs wait for the end
    if (V & 2) { while (w[8] == 0) __nanosleep(1000); } else { while (w[8] == 0) {} }
    return;
  }
  int fail = 0;
  if (threadIdx.x == 0) {
    for (int r = 1; r <= reps && !fail; ++r) {
      w[2 + r % 4] = r;
      cudaGraphLaunch((cudaGraphExec_t)graphs[r % 4], cudaStreamGraphFireAndForget);
      const unsigned long long t0 = now();
      __threadfence_system();
      w[1] = r;
      while (w[0] < (unsigned long long)r) { if (now() - t0 > 50000000ull) { fail = 1; break; } }
      stamps[r] = now() - t0;
    }
    if (fail) { stamps[0] = 999; w[1] = 1ull << 40; }
    w[8] = 1;
  } else if (!(V & 1)) {
    return;
  }
  if (V & 1) __syncthreads();  // the other threads of CTA 0 wait at a barrier, as the loop kernel's do
}
extern "C" __global__ void __launch_bounds__(256, 2) drive0(const unsigned long long* g, unsigned long long* w, unsigned long long* s, int r) { body<0>(g, w, s, r); }
extern "C" __global__ void __launch_bounds__(256, 2) drive1(const unsigned long long* g, unsigned long long* w, unsigned long long* s, int r) { body<1>(g, w, s, r); }
extern "C" __global__ void __launch_bounds__(256, 2) drive2(const unsigned long long* g, unsigned long long* w, unsigned long long* s, int r) { body<2>(g, w, s, r); }
extern "C" __global__ void __launch_bounds__(256, 2) drive4(const unsigned long long* g, unsigned long long* w, unsigned long long* s, int r) { body<4>(g, w, s, r); }
extern "C" __global__ void __launch_bounds__(256, 2) drive7(const unsigned long long* g, unsigned long long* w, unsigned long long* s, int r) { body<7>(g, w, s, r); }
extern "C" __global__ void __launch_bounds__(256, 2) drive3(const unsigned long long* g, unsigned long long* w, unsigned long long* s, int r) { body<3>(g, w, s, r); }
"""
mod = compile.load(SRC, rdc=True, cooperative=True)
import itertools
stream = cupy.cuda.Stream(non_blocking=True)
nbytes = 8192
src = cupy.arange(nbytes // 4, dtype=cupy.float32)
host = cupy.cuda.alloc_pinned_memory(nbytes)
import os
WARM = os.environ.get("WARM") == "1"
STACK = int(os.environ.get("STACK", "0"))
if STACK:
    runtime.deviceSetLimit(0, STACK)
print("stack limit", runtime.deviceGetLimit(0), "warm", WARM)
for v, gname in itertools.product((4, 0), ("gate",)):
    drive_fn = mod.get_function(f"drive{v}")
    gate_fn = mod.get_function(gname)
    words = cupy.zeros(16, cupy.uint64)
    graphs, keep = [], []
    for k in range(4):
        def record(k=k):
            ga = [np.array([words.data.ptr + 8], np.uint64), np.array([words.data.ptr + 8 * (2 + k)], np.uint64)]
            gp = np.array([a.ctypes.data for a in ga], np.uintp)
            keep.append((ga, gp))
            driver.launchKernel(gate_fn.kernel.ptr, 1, 1, 1, 32, 1, 1, 0, stream.ptr, gp.ctypes.data, 0)
            runtime.memcpyAsync(host.ptr, src.data.ptr, nbytes, 2, stream.ptr)
            runtime.memcpyAsync(words.data.ptr, words.data.ptr + 8 * (2 + k), 8, 3, stream.ptr)
        graphs.append(capture(stream, record, f"copy {k}"))
    handles = cupy.asarray(np.array([g.handle for g in graphs], np.uint64))
    if WARM:  # each copy graph once from the host, before the resident kernel
        words[1] = 1 << 40
        for gg in graphs:
            gg.launch(stream)
        stream.synchronize()
        words[:] = 0
    stamps = cupy.zeros(51, cupy.uint64)
    args = [np.array([handles.data.ptr], np.uint64), np.array([words.data.ptr], np.uint64),
            np.array([stamps.data.ptr], np.uint64), np.array([50], np.int32)]
    params = np.array([a.ctypes.data for a in args], np.uintp)
    def rec():
        driver.launchCooperativeKernel(drive_fn.kernel.ptr, 132, 1, 1, 256, 1, 1, 16, stream.ptr, params.ctypes.data)
    g = capture(stream, rec, "drive")
    g.launch(stream)
    stream.synchronize()
    st = stamps.get()
    what = {4: "local memory", 7: "local memory + barrier + sleep-poll", 0: "no local memory"}[v]
    what += f" drive lmem {drive_fn.attributes['local_size_bytes']} gate lmem {gate_fn.attributes['local_size_bytes']}"
    print(f"{what}: {'STUCK' if st[0] == 999 else f'median {np.median(st[11:]) / 1e3:.2f} us'}", flush=True)
    g.close()
    for gg in graphs:
        gg.close()
