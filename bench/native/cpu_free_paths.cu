// The copy paths `arkdma bench dma` measures beside the engine, timed on the GPU clock:
//   baseline   CPU-controlled: kernel; sync; copies; sync; kernel (GPU time from the end of the first
//              kernel to the start of the second);
//   prearmed   copies enqueued ahead on a copy stream behind cuStreamWaitValue32 on a word a GPU
//              thread writes; the stream then writes a done word the thread spins on;
//   devgraph   a GPU thread launches a pre-instantiated device graph (the copies, then a 4-byte token
//              copy into the done word) and spins on the done word; the launcher runs inside a graph.
// Every function returns 0, or -1 with arkdma_paths_error() saying which call failed and why.
// Samples: per round trip, the globaltimer and clock64 deltas, and the whole loop's span of both, so
// the caller can calibrate clock64 (fine-grained) against globaltimer (ns).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::string g_error;

bool fail(const char* what, cudaError_t e) {
  g_error = std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  return false;
}

#define CK(call)                                       \
  do {                                                 \
    cudaError_t e_ = (call);                           \
    if (e_ != cudaSuccess) return fail(#call, e_);     \
  } while (0)

enum Direction { D2H = 0, H2D = 1, D2D = 2 };

__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void stamp(unsigned long long* t) { *t = globaltimer(); }

__global__ void timer_probe(unsigned long long* out, int n) {
  unsigned long long best = ~0ull, prev = globaltimer();
  for (int i = 0; i < n; ++i) {
    const unsigned long long t = globaltimer();
    if (t != prev && t - prev < best) best = t - prev;
    prev = t;
  }
  *out = best;
}

struct Buffers {
  void* src = nullptr;
  void* dst = nullptr;
  bool src_host = false, dst_host = false;
  cudaMemcpyKind kind = cudaMemcpyDefault;

  bool alloc(int direction, size_t bytes) {
    src_host = direction == H2D;
    dst_host = direction == D2H;
    kind = direction == D2H ? cudaMemcpyDeviceToHost : direction == H2D ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice;
    if (src_host) CK(cudaHostAlloc(&src, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
    else CK(cudaMalloc(&src, bytes));
    if (dst_host) CK(cudaHostAlloc(&dst, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
    else CK(cudaMalloc(&dst, bytes));
    if (src_host) std::memset(src, 0x5A, bytes);
    else CK(cudaMemset(src, 0x5A, bytes));
    return true;
  }
  ~Buffers() {
    if (src) src_host ? cudaFreeHost(src) : cudaFree(src);
    if (dst) dst_host ? cudaFreeHost(dst) : cudaFree(dst);
  }
  char* s(size_t off) const { return static_cast<char*>(src) + off; }
  char* d(size_t off) const { return static_cast<char*>(dst) + off; }
};

struct Stream {
  cudaStream_t s = nullptr;
  bool create() { CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); return true; }
  ~Stream() { if (s) cudaStreamDestroy(s); }
};

template <typename T>
struct DeviceArray {
  T* p = nullptr;
  bool alloc(size_t n) { CK(cudaMalloc(&p, n * sizeof(T))); CK(cudaMemset(p, 0, n * sizeof(T))); return true; }
  ~DeviceArray() { if (p) cudaFree(p); }
};

// --- pre-armed stream chain ------------------------------------------------------------------

using StreamWaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using StreamWaitValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
using StreamWriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

bool driver_entry(const char* name, void** fn) {
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &q));
  if (q != cudaDriverEntryPointSuccess || *fn == nullptr) {
    g_error = std::string("the CUDA driver has no ") + name;
    return false;
  }
  return true;
}

// n timed round trips. Round i writes its value v = base + i + 1 into `token`, `start(i)` sends it on its way
// (0, or a status to stop with), then the round spins until `arrived(v)`; its globaltimer and clock64 deltas
// go to ns[at + i] and clk[at + i], and the whole loop's span of both is added to span[0..1]. Returns 0,
// start's status, or 2 when a round ran past `budget_ns`.
template <typename Start, typename Arrived>
__device__ int timed_rounds(uint32_t* token, uint32_t base, int n, int at, unsigned long long budget_ns, Start start,
                            Arrived arrived, unsigned long long* ns, long long* clk, unsigned long long* span) {
  const unsigned long long span0 = globaltimer();
  const long long clk0 = clock64();
  for (int i = 0; i < n; ++i) {
    const uint32_t v = base + i + 1;
    const unsigned long long t0 = globaltimer();
    const long long c0 = clock64();
    *reinterpret_cast<volatile uint32_t*>(token) = v;
    const int started = start(i);
    if (started != 0) return started;
    while (!arrived(v))
      if (globaltimer() - t0 > budget_ns) return 2;
    clk[at + i] = clock64() - c0;
    ns[at + i] = globaltimer() - t0;
  }
  span[0] += globaltimer() - span0;
  span[1] += clock64() - clk0;
  return 0;
}

// Waits for `go` (the host enqueued everything), then n round trips: write trigger, spin on done.
__global__ void trigger_loop(uint32_t* trigger, const uint32_t* done, const volatile uint32_t* go, uint32_t base, int n,
                             unsigned long long budget_ns, unsigned long long* ns, long long* clk,
                             unsigned long long* span, int* status) {
  const unsigned long long t_go = globaltimer();
  while (*go == 0)
    if (globaltimer() - t_go > budget_ns) { *status = 1; return; }
  const int rc = timed_rounds(
      trigger, base, n, 0, budget_ns, [](int) { __threadfence_system(); return 0; },
      [&](uint32_t v) { return *reinterpret_cast<const volatile uint32_t*>(done) >= v; }, ns, clk, span);
  if (rc != 0) *status = rc;
}

// --- device graph -----------------------------------------------------------------------------

struct LaunchParams {
  uint32_t base;
  int n;
};

__global__ void graph_launcher(const cudaGraphExec_t* pool, int pool_size, uint32_t* token, const uint32_t* done,
                               const LaunchParams* params, unsigned long long budget_ns, unsigned long long* ns,
                               long long* clk, unsigned long long* span, int* status) {
  const uint32_t base = params->base;
  const auto launch = [&](int i) {
    __threadfence();
    const cudaError_t e = cudaGraphLaunch(pool[(base + i) % pool_size], cudaStreamGraphFireAndForget);
    return e == cudaSuccess ? 0 : 100 + static_cast<int>(e);
  };
  const int rc = timed_rounds(
      token, base, params->n, static_cast<int>(base), budget_ns, launch,
      [&](uint32_t v) { return *reinterpret_cast<const volatile uint32_t*>(done) == v; }, ns, clk, span);
  if (rc != 0) *status = rc;
}

constexpr int GRAPH_POOL = 4;
constexpr int LAUNCHES_PER_PARENT = 100;  // a parent graph run allows at most 119 fire-and-forget launches

bool check_status(const int* status_dev, const char* what) {
  int status = 0;
  CK(cudaMemcpy(&status, status_dev, sizeof(status), cudaMemcpyDeviceToHost));
  if (status == 0) return true;
  if (status == 1) g_error = std::string(what) + ": the host's go signal never came";
  else if (status == 2) g_error = std::string(what) + ": a round trip ran past its budget";
  else g_error = std::string(what) + ": device-side cudaGraphLaunch failed: " +
                 cudaGetErrorName(static_cast<cudaError_t>(status - 100));
  return false;
}

// The round trips' samples, then the spans of all of them (ns_out[total] in ns, ns_out[total + 1] in clock64 cycles).
bool read_samples(const DeviceArray<unsigned long long>& ns, const DeviceArray<long long>& clk,
                  const DeviceArray<unsigned long long>& span, int total, unsigned long long* ns_out, long long* clk_out) {
  CK(cudaMemcpy(ns_out, ns.p, total * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(ns_out + total, span.p, 2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(clk_out, clk.p, total * sizeof(long long), cudaMemcpyDeviceToHost));
  return true;
}

bool baseline(int direction, size_t bytes, int inflight, int iterations, unsigned long long* ns_out) {
  Buffers b;
  Stream s;
  DeviceArray<unsigned long long> stamps;
  if (!b.alloc(direction, bytes * inflight) || !s.create() || !stamps.alloc(2 * iterations)) return false;
  for (int i = 0; i < iterations; ++i) {
    stamp<<<1, 1, 0, s.s>>>(stamps.p + 2 * i);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s.s));
    for (int j = 0; j < inflight; ++j) CK(cudaMemcpyAsync(b.d(j * bytes), b.s(j * bytes), bytes, b.kind, s.s));
    CK(cudaStreamSynchronize(s.s));
    stamp<<<1, 1, 0, s.s>>>(stamps.p + 2 * i + 1);
    CK(cudaGetLastError());
  }
  CK(cudaStreamSynchronize(s.s));
  std::vector<unsigned long long> t(2 * iterations);
  CK(cudaMemcpy(t.data(), stamps.p, t.size() * sizeof(t[0]), cudaMemcpyDeviceToHost));
  for (int i = 0; i < iterations; ++i) ns_out[i] = t[2 * i + 1] - t[2 * i];
  return true;
}

bool prearmed(int direction, size_t bytes, int inflight, int iterations, double budget_s, unsigned long long* ns_out,
              long long* clk_out) {
  void *wait_fn = nullptr, *write_fn = nullptr;
  if (!driver_entry("cuStreamWaitValue32", &wait_fn) || !driver_entry("cuStreamWriteValue32", &write_fn)) return false;
  auto wait_value = reinterpret_cast<StreamWaitValue32>(wait_fn);
  auto write_value = reinterpret_cast<StreamWriteValue32>(write_fn);
  Buffers b;
  Stream copies, kernel;
  DeviceArray<uint32_t> words;  // [0] trigger, [1] done
  DeviceArray<int> status;
  DeviceArray<unsigned long long> ns, span;
  DeviceArray<long long> clk;
  if (!b.alloc(direction, bytes * inflight) || !copies.create() || !kernel.create() || !words.alloc(2) ||
      !status.alloc(1) || !ns.alloc(iterations) || !span.alloc(2) || !clk.alloc(iterations))
    return false;
  volatile uint32_t* go = nullptr;
  CK(cudaHostAlloc((void**)&go, sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
  // A stream holds only a few hundred queued operations before the host blocks: batches of round trips.
  const int per_batch = std::max(1, std::min(iterations, 600 / (inflight + 2)));
  const auto budget_ns = static_cast<unsigned long long>(budget_s * 1e9);
  bool ok = true;
  for (int base = 0; base < iterations && ok; base += per_batch) {
    const int n = std::min(per_batch, iterations - base);
    *go = 0;
    trigger_loop<<<1, 1, 0, kernel.s>>>(words.p, words.p + 1, go, base, n, budget_ns, ns.p + base, clk.p + base,
                                        span.p, status.p);
    const cudaError_t el = cudaGetLastError();
    if (el != cudaSuccess) { ok = fail("trigger_loop launch", el); break; }
    const auto trigger = reinterpret_cast<CUdeviceptr>(words.p), done = reinterpret_cast<CUdeviceptr>(words.p + 1);
    for (int i = 0; i < n && ok; ++i) {
      const uint32_t v = base + i + 1;
      if (wait_value(copies.s, trigger, v, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS) {
        g_error = "cuStreamWaitValue32 refused";
        ok = false;
        break;
      }
      for (int j = 0; j < inflight; ++j) {
        const cudaError_t e = cudaMemcpyAsync(b.d(j * bytes), b.s(j * bytes), bytes, b.kind, copies.s);
        if (e != cudaSuccess) { ok = fail("cudaMemcpyAsync", e); break; }
      }
      if (ok && write_value(copies.s, done, v, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS) {
        g_error = "cuStreamWriteValue32 refused";
        ok = false;
      }
    }
    *go = 1;
    const cudaError_t ek = cudaStreamSynchronize(kernel.s);
    if (ek != cudaSuccess) { ok = fail("trigger_loop", ek); break; }
    if (!check_status(status.p, "pre-armed chain")) ok = false;
    if (!ok) {
      // Release every wait still queued so the copy stream drains instead of blocking forever.
      const uint32_t release = base + n;
      cudaMemcpy(words.p, &release, sizeof(release), cudaMemcpyHostToDevice);
    }
    const cudaError_t ec = cudaStreamSynchronize(copies.s);
    if (ok && ec != cudaSuccess) ok = fail("copy stream", ec);
  }
  cudaFreeHost((void*)go);
  return ok && read_samples(ns, clk, span, iterations, ns_out, clk_out);
}

bool devgraph(int direction, size_t bytes, int inflight, int iterations, double budget_s, unsigned long long* ns_out,
              long long* clk_out) {
  Buffers b;
  Stream s;
  DeviceArray<uint32_t> words;  // [0] token, [1] done
  DeviceArray<int> status;
  DeviceArray<unsigned long long> ns, span;
  DeviceArray<long long> clk;
  DeviceArray<cudaGraphExec_t> pool_dev;
  DeviceArray<LaunchParams> params;
  if (!b.alloc(direction, bytes * inflight) || !s.create() || !words.alloc(2) || !status.alloc(1) ||
      !ns.alloc(iterations) || !span.alloc(2) || !clk.alloc(iterations) || !pool_dev.alloc(GRAPH_POOL) ||
      !params.alloc(1))
    return false;
  cudaGraph_t graphs[GRAPH_POOL] = {};
  cudaGraphExec_t execs[GRAPH_POOL] = {};
  cudaGraph_t parent = nullptr;
  cudaGraphExec_t parent_exec = nullptr;
  auto cleanup = [&] {
    for (int k = 0; k < GRAPH_POOL; ++k) {
      if (execs[k]) cudaGraphExecDestroy(execs[k]);
      if (graphs[k]) cudaGraphDestroy(graphs[k]);
    }
    if (parent_exec) cudaGraphExecDestroy(parent_exec);
    if (parent) cudaGraphDestroy(parent);
  };
  auto build = [&]() -> bool {
    for (int k = 0; k < GRAPH_POOL; ++k) {
      CK(cudaGraphCreate(&graphs[k], 0));
      std::vector<cudaGraphNode_t> copies(inflight);
      for (int j = 0; j < inflight; ++j)
        CK(cudaGraphAddMemcpyNode1D(&copies[j], graphs[k], nullptr, 0, b.d(j * bytes), b.s(j * bytes), bytes, b.kind));
      cudaGraphNode_t token;
      CK(cudaGraphAddMemcpyNode1D(&token, graphs[k], copies.data(), copies.size(), words.p + 1, words.p,
                                  sizeof(uint32_t), cudaMemcpyDeviceToDevice));
      CK(cudaGraphInstantiate(&execs[k], graphs[k], cudaGraphInstantiateFlagDeviceLaunch));
      CK(cudaGraphUpload(execs[k], s.s));
    }
    CK(cudaMemcpy(pool_dev.p, execs, sizeof(execs), cudaMemcpyHostToDevice));
    // The launcher must itself run inside a graph for device-side launches to be allowed.
    CK(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeThreadLocal));
    graph_launcher<<<1, 1, 0, s.s>>>(pool_dev.p, GRAPH_POOL, words.p, words.p + 1, params.p,
                                     static_cast<unsigned long long>(budget_s * 1e9), ns.p, clk.p, span.p, status.p);
    CK(cudaStreamEndCapture(s.s, &parent));
    CK(cudaGraphInstantiate(&parent_exec, parent, 0));
    return true;
  };
  auto run = [&]() -> bool {
    for (int base = 0; base < iterations; base += LAUNCHES_PER_PARENT) {
      const LaunchParams p{static_cast<uint32_t>(base), std::min(LAUNCHES_PER_PARENT, iterations - base)};
      CK(cudaMemcpyAsync(params.p, &p, sizeof(p), cudaMemcpyHostToDevice, s.s));
      CK(cudaGraphLaunch(parent_exec, s.s));
      CK(cudaStreamSynchronize(s.s));
      if (!check_status(status.p, "device graph")) return false;
    }
    return read_samples(ns, clk, span, iterations, ns_out, clk_out);
  };
  const bool ok = build() && run();
  cleanup();
  return ok;
}

}  // namespace

extern "C" {

const char* arkdma_paths_error() { return g_error.c_str(); }

int arkdma_paths_timer_resolution(unsigned long long* ns) {
  DeviceArray<unsigned long long> out;
  if (!out.alloc(1)) return -1;
  timer_probe<<<1, 1>>>(out.p, 100000);
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return fail("timer_probe", e), -1;
  return cudaMemcpy(ns, out.p, sizeof(*ns), cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
}

// ns_out: `iterations` samples. No clock64 samples: the host syncs between the stamps.
int arkdma_paths_baseline(int direction, unsigned long long bytes, int inflight, int iterations,
                          unsigned long long* ns_out) {
  return baseline(direction, bytes, inflight, iterations, ns_out) ? 0 : -1;
}

// ns_out: iterations + 2 (samples, then the span in ns and in clock64 cycles); clk_out: iterations.
int arkdma_paths_prearmed(int direction, unsigned long long bytes, int inflight, int iterations, double budget_s,
                          unsigned long long* ns_out, long long* clk_out) {
  return prearmed(direction, bytes, inflight, iterations, budget_s, ns_out, clk_out) ? 0 : -1;
}

int arkdma_paths_devgraph(int direction, unsigned long long bytes, int inflight, int iterations, double budget_s,
                          unsigned long long* ns_out, long long* clk_out) {
  return devgraph(direction, bytes, inflight, iterations, budget_s, ns_out, clk_out) ? 0 : -1;
}

// Enqueues on `stream` a wait until the 64-bit word at `addr` reaches `value` (cuStreamWaitValue64, GEQ):
// work after it on the stream waits on the copy engines' front end, not on an SM.
int arkdma_paths_stream_wait_geq64(unsigned long long stream, unsigned long long addr, unsigned long long value) {
  static StreamWaitValue64 wait64 = nullptr;
  if (wait64 == nullptr) {
    void* fn = nullptr;
    if (!driver_entry("cuStreamWaitValue64", &fn)) return -1;
    wait64 = reinterpret_cast<StreamWaitValue64>(fn);
  }
  const CUresult rc = wait64(reinterpret_cast<CUstream>(stream), addr, value, CU_STREAM_WAIT_VALUE_GEQ);
  if (rc != CUDA_SUCCESS) {
    g_error = "cuStreamWaitValue64 refused (CUresult " + std::to_string(static_cast<int>(rc)) + ")";
    return -1;
  }
  return 0;
}

}  // extern "C"
