"""Cross-SM hand-over floor: two CTAs on two SMs pass a token N times through counters in GPU memory.
Variants: flag only; flag + a 1 KiB tile (load the other's 256 floats, negate, store); the poll relaxed then one
fence; the signal as fence + relaxed add. Prints us per hand-over (median of 5 launches)."""
import sys, statistics
import cupy as cp

SRC = r"""
extern "C" __global__ void pp(unsigned long long* flags, float* buf, int n, int mode, long long* t, int* smid) {
  const int me = blockIdx.x;
  if (me > 1) return;
  if (threadIdx.x == 0) asm volatile("mov.u32 %0, %%smid;" : "=r"(smid[me]));
  unsigned long long* mine = flags + 16 * me;
  unsigned long long* other = flags + 16 * (1 - me);
  float* in = buf + 256 * (1 - me);
  float* out = buf + 256 * me;
  long long t0 = clock64();
  unsigned long long g0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
  for (int i = 0; i < n; ++i) {
    // CTA 0 goes at i (waits for CTA 1's i-th), CTA 1 waits for CTA 0's (i+1)-th
    const unsigned long long target = (unsigned long long)i + (me == 0 ? 0ull : 1ull);
    if (threadIdx.x == 0 && target > 0) {
      unsigned long long v;
      if (mode & 2) {
        do { asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(other) : "memory"); } while (v < target);
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
      } else {
        do { asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(other) : "memory"); } while (v < target);
      }
    }
    __syncthreads();
    if (mode & 1) {
      float x = in[threadIdx.x];
      out[threadIdx.x] = -x;
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      if (mode & 4) { __threadfence(); atomicAdd(mine, 1ull); }
      else asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(mine) : "memory");
    }
  }
  unsigned long long g1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g1));
  if (threadIdx.x == 0) t[me] = (long long)(g1 - g0);
}
"""
k = cp.RawKernel(SRC, "pp")
n = 20000
names = {0: "flag only (acquire poll, release red)", 1: "flag + 1 KiB tile", 3: "flag + tile, relaxed poll + fence",
         5: "flag + tile, fence + relaxed add", 2: "flag only, relaxed poll + fence"}
for mode in (0, 2, 1, 3, 5):
    res = []
    for rep in range(6):
        flags = cp.zeros(64, dtype=cp.uint64)
        buf = cp.zeros(512, dtype=cp.float32)
        t = cp.zeros(2, dtype=cp.int64)
        sm = cp.zeros(2, dtype=cp.int32)
        k((132,), (256,), (flags, buf, cp.int32(n), cp.int32(mode), t, sm))
        cp.cuda.Device().synchronize()
        if rep:
            res.append(float(t.get().max()) / (2 * n) / 1e3)
    print(f"mode {mode} {names[mode]:40s} us/hand-over median {statistics.median(res):.3f} "
          f"range {min(res):.3f}-{max(res):.3f} sms {sm.get().tolist()}", flush=True)
