"""1 MiB (and 8 KiB) GPU -> pinned host by SM stores, as the loop kernel's SM copy path does (16-byte stores, each
CTA a contiguous chunk), against Hopper bulk copies (cp.async.bulk: the chunk into shared memory, then out to the
host in one bulk store), and the copy engine (cudaMemcpyAsync). The SM kernels time themselves: first CTA start to
last CTA end (after __threadfence_system), by the global timer."""
import sys, json
import numpy as np
import cupy
from cupy.cuda import runtime
sys.path.insert(0, ".")
from driver.gpu import compile

SRC = r"""
__device__ unsigned long long now() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
extern "C" __global__ void stores(const uint4* src, uint4* dst, unsigned long long chunk, unsigned long long* stamps) {
  const unsigned long long t0 = now();
  const uint4* s = src + blockIdx.x * (chunk / 16);
  uint4* d = dst + blockIdx.x * (chunk / 16);
  for (unsigned long long i = threadIdx.x; i < chunk / 16; i += blockDim.x) d[i] = s[i];
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) { stamps[2 * blockIdx.x] = t0; stamps[2 * blockIdx.x + 1] = now(); }
}
extern "C" __global__ void bulk(const char* src, char* dst, unsigned long long chunk, unsigned long long* stamps) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) unsigned long long bar;
  const unsigned long long t0 = now();
  const unsigned sb = (unsigned)__cvta_generic_to_shared(smem), mb = (unsigned)__cvta_generic_to_shared(&bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(mb) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(mb), "r"((unsigned)chunk) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(sb), "l"(src + blockIdx.x * chunk), "r"((unsigned)chunk), "r"(mb) : "memory");
    asm volatile("{ .reg .pred p; W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0; @!p bra W; }" ::"r"(mb) : "memory");
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + blockIdx.x * chunk), "r"(sb), "r"((unsigned)chunk) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    __threadfence_system();
    stamps[2 * blockIdx.x] = t0; stamps[2 * blockIdx.x + 1] = now();
  }
}
"""
mod = compile.load(SRC)
stores, bulk = mod.get_function("stores"), mod.get_function("bulk")
out = {"device": runtime.getDeviceProperties(0)["name"].decode(), "rows": []}
stream = cupy.cuda.Stream(non_blocking=True)
for nbytes, ctas in ((8192, 1), (8192, 8), (1 << 20, 128), (1 << 20, 64)):
    chunk = nbytes // ctas
    src = cupy.arange(nbytes // 4, dtype=cupy.float32)
    host = cupy.cuda.alloc_pinned_memory(nbytes)
    hview = np.frombuffer(host, np.float32, nbytes // 4)
    stamps = cupy.zeros(2 * ctas, cupy.uint64)
    res = {}
    for rnd in range(3):
        for name in ("stores", "bulk", "copy_engine"):
            ts = []
            for rep in range(60):
                hview[:] = 0
                if name == "copy_engine":
                    e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
                    e0.record(stream)
                    runtime.memcpyAsync(host.ptr, src.data.ptr, nbytes, 2, stream.ptr)
                    e1.record(stream)
                    e1.synchronize()
                    ts.append(cupy.cuda.get_elapsed_time(e0, e1) * 1e3)
                else:
                    with stream:
                        fn = stores if name == "stores" else bulk
                        if name == "stores":
                            fn((ctas,), (256,), (src, np.uintp(host.ptr), np.uint64(chunk), stamps))
                        else:
                            fn((ctas,), (32,), (src, np.uintp(host.ptr), np.uint64(chunk), stamps), shared_mem=chunk)
                    stream.synchronize()
                    s = stamps.get().reshape(-1, 2)
                    ts.append((int(s[:, 1].max()) - int(s[:, 0].min())) / 1e3)
                assert hview[-1] == nbytes // 4 - 1 and hview[0] == 0 and hview[len(hview) // 2] == len(hview) // 2, name
            t = np.array(ts[10:])
            res.setdefault(name, []).append(t.tolist())
            gbps = nbytes / np.median(t) / 1e3
            print(f"{nbytes:>8} B {ctas:>3} CTAs {name:11s} round {rnd}: median {np.median(t):.3f} us ({gbps:.1f} GB/s) "
                  f"p10 {np.percentile(t,10):.3f} p90 {np.percentile(t,90):.3f}", flush=True)
    out["rows"].append({"bytes": nbytes, "ctas": ctas, "us": res})
json.dump(out, open(sys.argv[1], "w"))
