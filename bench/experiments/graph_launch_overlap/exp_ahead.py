"""Gated device-graph copies as the loop kernel drives them: the next copy's graph launched ahead while this copy
moves (between opening its gate and seeing it land: today) or after it landed. Times per copy: gate-open -> done
seen (the copy), and copy start -> copy start (the iteration, no other work)."""
import sys, json, time
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
__device__ unsigned long long now() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
extern "C" __global__ void drive(const unsigned long long* graphs, unsigned long long* words, unsigned long long* stamps,
                                 int reps, int after) {
  if (threadIdx.x || blockIdx.x) return;
  volatile unsigned long long* w = words;
  w[2 + 1 % %POOL%] = 1; __threadfence(); cudaGraphLaunch((cudaGraphExec_t)graphs[1 % %POOL%], cudaStreamGraphFireAndForget);
  for (int r = 1; r <= reps; ++r) {
    const unsigned long long t0 = now();
    __threadfence_system();
    w[1] = r;
    if (!after && r < reps) {
      w[2 + (r + 1) % %POOL%] = r + 1; __threadfence();
      cudaGraphLaunch((cudaGraphExec_t)graphs[(r + 1) % %POOL%], cudaStreamGraphFireAndForget);
    }
    const unsigned long long tw = now();
    while (w[0] < (unsigned long long)r) { if (now() - tw > 100000000ull) { stamps[0] = 1000 + r; return; } }
    stamps[2 * r] = now() - t0;
    if (after && r < reps) {
      w[2 + (r + 1) % %POOL%] = r + 1; __threadfence();
      cudaGraphLaunch((cudaGraphExec_t)graphs[(r + 1) % %POOL%], cudaStreamGraphFireAndForget);
    }
    stamps[2 * r + 1] = t0;
  }
}
""".replace("%POOL%", str(POOL))

mod = compile.load(SRC, rdc=True)
gate_fn, drive_fn = mod.get_function("gate"), mod.get_function("drive")
stream = cupy.cuda.Stream(non_blocking=True)
out = {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()}
for nbytes in (8192, 1 << 20):
    src = cupy.arange(nbytes // 4, dtype=cupy.float32)
    host = cupy.cuda.alloc_pinned_memory(nbytes)
    words = cupy.zeros(2 + POOL, cupy.uint64)
    for rnd in range(3):
        for after in (0, 1):
            words[:] = 0
            graphs = []
            for k in range(POOL):
                def record(k=k):
                    with stream:
                        gate_fn((1,), (1,), (words[1:2], words[2 + k:3 + k]))
                    runtime.memcpyAsync(host.ptr, src.data.ptr, nbytes, 2, stream.ptr)
                    runtime.memcpyAsync(words.data.ptr, words.data.ptr + 8 * (2 + k), 8, 3, stream.ptr)
                graphs.append(capture(stream, record, f"copy {k}"))
            handles = cupy.asarray(np.array([g.handle for g in graphs], np.uint64))
            reps = 100  # within the 120 fire-and-forget launches one run of a graph may make
            stamps = cupy.zeros(2 * reps + 2, cupy.uint64)
            def record_drive():
                with stream:
                    drive_fn((1,), (32,), (handles, words, stamps, np.int32(reps), np.int32(after)))
            g = capture(stream, record_drive, "drive")
            g.launch(stream)
            stream.synchronize()
            s = stamps.get()
            if s[0]:
                print("timed out at copy", int(s[0]) - 1000, flush=True); continue
            copy = s[2 * np.arange(11, reps + 1)] / 1e3
            starts = s[2 * np.arange(11, reps + 1) + 1].astype(np.int64)
            it = np.diff(starts) / 1e3
            name = "ahead_after_landed" if after else "ahead_while_moving"
            print(f"{nbytes:>8} B {name:19s} round {rnd}: copy median {np.median(copy):.3f} us "
                  f"(p10 {np.percentile(copy,10):.3f} p90 {np.percentile(copy,90):.3f}); iteration median {np.median(it):.3f} us "
                  f"(p10 {np.percentile(it,10):.3f} p90 {np.percentile(it,90):.3f})", flush=True)
            out.setdefault(str(nbytes), {}).setdefault(name, []).append({"copy": copy.tolist(), "iteration": it.tolist()})
            g.close()
            for gg in graphs:
                gg.close()
json.dump(out, open(sys.argv[1], "w"))
