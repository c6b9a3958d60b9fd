"""Gated device-graph copy (as the loop kernel's graph path): the token that says the copy landed written by a
second memcpy node (today) or by a one-thread kernel node. Times gate-open -> done seen, per copy (global timer)."""
import sys, json
import numpy as np
import cupy
from cupy.cuda import runtime
sys.path.insert(0, ".")
from driver.gpu import compile
from driver.gpu.device_graphs import capture

POOL = 4
SRC = r"""
#include <cuda_runtime.h>
extern "C" __global__ void gate(const unsigned long long* gate, const unsigned long long* ticket) {
  const unsigned long long n = *(volatile const unsigned long long*)ticket;
  while (*(volatile const unsigned long long*)gate < n) {}
}
extern "C" __global__ void mark(unsigned long long* done, const unsigned long long* token) {
  *(volatile unsigned long long*)done = *(volatile const unsigned long long*)token;
}
__device__ unsigned long long now() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
extern "C" __global__ void drive(const unsigned long long* graphs, unsigned long long* words, unsigned long long* stamps,
                                 int reps, unsigned long long work_ns) {
  if (threadIdx.x || blockIdx.x) return;
  volatile unsigned long long* w = words;
  w[2 + 1 % %POOL%] = 1; __threadfence(); cudaGraphLaunch((cudaGraphExec_t)graphs[1 % %POOL%], cudaStreamGraphFireAndForget);
  for (int r = 1; r <= reps; ++r) {
    const unsigned long long s = now();
    while (now() - s < work_ns) {}
    const unsigned long long t0 = now();
    __threadfence_system();
    w[1] = r;
    const unsigned long long tw = now();
    while (w[0] < (unsigned long long)r) { if (now() - tw > 100000000ull) { stamps[0] = 1000 + r; return; } }
    stamps[r] = now() - t0;
    if (r < reps) {
      w[2 + (r + 1) % %POOL%] = r + 1; __threadfence();
      cudaGraphLaunch((cudaGraphExec_t)graphs[(r + 1) % %POOL%], cudaStreamGraphFireAndForget);
    }
  }
}
""".replace("%POOL%", str(POOL))

import time
T0 = time.time()
print('compiling', flush=True)
mod = compile.load(SRC, rdc=True)
print('compiled', time.time() - T0, flush=True)
gate_fn, mark_fn, drive_fn = mod.get_function("gate"), mod.get_function("mark"), mod.get_function("drive")
stream = cupy.cuda.Stream(non_blocking=True)
out = {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()}
for nbytes in (8192, 1 << 20):
    src = cupy.arange(nbytes // 4, dtype=cupy.float32)
    host = cupy.cuda.alloc_pinned_memory(nbytes)
    words = cupy.zeros(2 + POOL, cupy.uint64)
    for rnd in range(3):
        for variant in ("memcpy_token", "kernel_token"):
            words[:] = 0
            graphs = []
            for k in range(POOL):
                def record(k=k):
                    with stream:
                        gate_fn((1,), (1,), (words[1:2], words[2 + k:3 + k]))
                    runtime.memcpyAsync(host.ptr, src.data.ptr, nbytes, 2, stream.ptr)
                    if variant == "memcpy_token":
                        runtime.memcpyAsync(words.data.ptr, words.data.ptr + 8 * (2 + k), 8, 3, stream.ptr)
                    else:
                        with stream:
                            mark_fn((1,), (1,), (words[0:1], words[2 + k:3 + k]))
                graphs.append(capture(stream, record, f"copy {k}"))
            handles = cupy.asarray(np.array([g.handle for g in graphs], np.uint64))
            reps = 100  # within the 120 fire-and-forget launches one run of a graph may make
            stamps = cupy.zeros(reps + 1, cupy.uint64)
            def record_drive():
                with stream:
                    drive_fn((1,), (32,), (handles, words, stamps, np.int32(reps), np.uint64(30000)))
            g = capture(stream, record_drive, "drive")
            print('launch', nbytes, variant, time.time() - T0, flush=True)
            g.launch(stream)
            stream.synchronize()
            if int(stamps[0].get()): print('timed out at copy', int(stamps[0].get()) - 1000, flush=True); continue
            t = stamps.get()[11:] / 1e3
            ok = bool(np.frombuffer(host, np.float32, nbytes // 4)[-1] == nbytes // 4 - 1)
            print(f"{nbytes:>8} B {variant:13s} round {rnd}: median {np.median(t):.3f} us p10 {np.percentile(t,10):.3f} "
                  f"p90 {np.percentile(t,90):.3f} ok {ok}", flush=True)
            out.setdefault(str(nbytes), {}).setdefault(variant, []).append(t.tolist())
            g.close()
            for gg in graphs:
                gg.close()
json.dump(out, open(sys.argv[1], "w"))
