"""Device graph copy: launched at the copy (today) against launched ahead and held by a gate kernel until the copy's
data is ready. One persistent CTA drives it; it times (global timer) data-ready -> done-word seen, per copy."""
import sys, json
import numpy as np
import cupy
from cupy.cuda import runtime
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))  # the checkout
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
                                 int reps, int mode, unsigned long long work_ns) {
  // words[0]: done (the token copied in), words[1]: gate, words[2 + k]: slot k's ticket/token
  if (threadIdx.x || blockIdx.x) return;
  volatile unsigned long long* w = words;
  if (mode == 1) { w[2 + 1 % %POOL%] = 1; __threadfence(); cudaGraphLaunch((cudaGraphExec_t)graphs[1 % %POOL%], cudaStreamGraphFireAndForget); }
  for (int r = 1; r <= reps; ++r) {
    const unsigned long long s = now();
    while (now() - s < work_ns) {}  // the tiles before the copy
    const unsigned long long t0 = now();
    if (mode == 0) {
      w[2 + r % %POOL%] = r;
      __threadfence_system();
      cudaGraphLaunch((cudaGraphExec_t)graphs[r % %POOL%], cudaStreamGraphFireAndForget);
    } else {
      __threadfence_system();
      w[1] = r;  // the gate opens for copy r
    }
    while (w[0] < (unsigned long long)r) {}
    stamps[r] = now() - t0;
    if (mode == 1 && r < reps) {
      w[2 + (r + 1) % %POOL%] = r + 1; __threadfence();
      cudaGraphLaunch((cudaGraphExec_t)graphs[(r + 1) % %POOL%], cudaStreamGraphFireAndForget);
    }
  }
}
""".replace("%POOL%", str(POOL))

mod = compile.load(SRC, rdc=True)
gate_fn, drive_fn = mod.get_function("gate"), mod.get_function("drive")
stream = cupy.cuda.Stream(non_blocking=True)
out = {}
for nbytes in (8192, 1 << 20):
    src = cupy.arange(nbytes // 4, dtype=cupy.float32)
    host = cupy.cuda.alloc_pinned_memory(nbytes)
    hp = runtime.hostGetDevicePointer(host.ptr, 0) if False else host.ptr
    words = cupy.zeros(2 + POOL, cupy.uint64)
    for mode in (0, 1, 0, 1):
        words[:] = 0
        graphs = []
        for k in range(POOL):
            def record(k=k):
                if mode == 1:
                    with stream:
                        gate_fn((1,), (1,), (words[1:2], words[2 + k:3 + k]))
                runtime.memcpyAsync(hp, src.data.ptr, nbytes, 2, stream.ptr)
                runtime.memcpyAsync(words.data.ptr, words.data.ptr + 8 * (2 + k), 8, 3, stream.ptr)
            graphs.append(capture(stream, record, f"copy {k}"))
        handles = cupy.asarray(np.array([g.handle for g in graphs], np.uint64))
        stamps = cupy.zeros(101, cupy.uint64)
        reps = 100
        def record_drive():
            with stream:
                drive_fn((1,), (32,), (handles, words, stamps, np.int32(reps), np.int32(mode), np.uint64(30000)))
        g = capture(stream, record_drive, "drive")
        g.launch(stream)
        stream.synchronize()
        t = stamps.get()[11:] / 1e3
        ok = np.frombuffer(host, np.float32, nbytes // 4)[-1] == nbytes // 4 - 1
        print(f"{nbytes:>8} B mode {'gated' if mode else 'launch'}: median {np.median(t):.2f} us p10 {np.percentile(t,10):.2f} p90 {np.percentile(t,90):.2f} ok {ok}", flush=True)
        out.setdefault(str(nbytes), {}).setdefault("gated" if mode else "launch", []).append(t.tolist())
        g.close()
        for gg in graphs:
            gg.close()
json.dump(out, open(sys.argv[1], "w"))
