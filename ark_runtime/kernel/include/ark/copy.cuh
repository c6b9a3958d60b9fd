/* The copy op from inside the loop kernel: by the CTA's own stores, posted to a DMA engine's queue through
 * device.cuh by one thread, or started on a copy engine by one thread launching a device graph built for it;
 * the thread then waits for its completion. */
#ifndef ARK_COPY_CUH
#define ARK_COPY_CUH

#include <arkdma/device.cuh>

#include "codes.h"  // GRAPH_POOL, GRAPH_GATE, GRAPH_AHEAD, GRAPH_WORDS, GRAPH_WAIT_TIMEOUT (generated)

namespace ark {

constexpr unsigned long long DMA_CHUNK = 1ull << 30;  // bytes per descriptor (the length field is 32 bits)

__device__ __forceinline__ void sm_copy(const void* src, void* dst, unsigned long long n) {
  const bool aligned = (((unsigned long long)src | (unsigned long long)dst) & 15ull) == 0ull;
  unsigned long long head = 0;
  if (aligned) {
    const uint4* s = (const uint4*)src;
    uint4* d = (uint4*)dst;
    for (unsigned long long i = threadIdx.x; i < n / 16; i += blockDim.x) d[i] = s[i];
    head = n / 16 * 16;
  }
  const unsigned char* s = (const unsigned char*)src;
  unsigned char* d = (unsigned char*)dst;
  for (unsigned long long i = head + threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

/* Thread 0 only: the whole of region src (from offset 0) into region dst, n bytes. An ARKDMA_DEV_* code. */
__device__ __forceinline__ unsigned dma_copy(const arkdma_queue& q, int src_region, int dst_region, unsigned long long n) {
  unsigned long long ticket = 0;
  for (unsigned long long off = 0; off < n; off += DMA_CHUNK) {
    const unsigned len = (unsigned)(n - off < DMA_CHUNK ? n - off : DMA_CHUNK);
    const unsigned rc = arkdma::post(q, arkdma::copy((uint16_t)src_region, off, (uint16_t)dst_region, off, len,
                                                          ARKDMA_FLAG_NOTIFY), &ticket);
    if (rc != ARKDMA_DEV_OK) return rc;
  }
  return arkdma::wait(q, ticket);
}

/* The device-graph path. Each graph copy has GRAPH_POOL instances of its graph, launched in turn (an executable
 * graph runs one launch at a time, and a launch's last node lands a little before the graph counts as finished),
 * and GRAPH_WORDS words: [0] done (the graph's last node copies its token here), [1] launches so far, [2 + k]
 * instance k's token, [GRAPH_GATE] the gate and [GRAPH_AHEAD] the token of the launch made ahead (0: none).
 *
 * Gated graphs (p.copies[op].z, where the host found that ark_graph_gate can start beside the loop kernel) start
 * with ark_graph_gate, which holds the copy until the gate reaches the launch's token. Once a copy's gate is open
 * and the kernel has been asked for the next iteration within this run of its graph (`graph_ahead`), the next copy
 * is launched while this one moves, and waits at its gate: the next copy tile only fences and opens the gate, and
 * the launch (a few us of the thread's time) overlaps a copy in flight rather than preceding one. At the end of a run of the
 * kernel's graph nothing is launched ahead (a tail launch waits for the fire-and-forget work); a kernel that leaves
 * early (stopped, faulted) opens any gate still shut (open_gates): the copy then moves what the source holds, which
 * is what the copy before it moved unless the host wrote the source while the kernel ran. */

#if ARK_GRAPH_COPIES
__shared__ bool graph_ahead;  // thread 0: the next iteration runs in this run of the kernel's graph (ark_loop sets it)

/* Thread 0: instance n % GRAPH_POOL with token n (a grid launched from a thread sees what the thread wrote before). */
__device__ __forceinline__ unsigned launch_graph(const unsigned long long* graphs, unsigned long long* words, unsigned long long n) {
  const int k = (int)(n % GRAPH_POOL);
  *(volatile unsigned long long*)(words + 2 + k) = n;
  return (unsigned)cudaGraphLaunch((cudaGraphExec_t)graphs[k], cudaStreamGraphFireAndForget);
}

/* Thread 0 only: the copy's next launch (made now, or ahead and released at its gate), waited for by its token. 0, a
 * cudaError_t of a launch, or GRAPH_WAIT_TIMEOUT. Only the copy op's one tile runs this, always on the same CTA:
 * words[1] and words[GRAPH_AHEAD] have one writer. */
__device__ __forceinline__ unsigned graph_copy(const unsigned long long* graphs, unsigned long long* words, unsigned long long budget_ns,
                               bool gated) {
  volatile unsigned long long* w = words;
  const unsigned long long n = w[1] + 1ull;
  w[1] = n;
  unsigned rc = 0u;
  if (!gated) {
    __threadfence_system();  // the token, and what earlier tiles wrote, in memory before the copy engine reads them
    rc = launch_graph(graphs, words, n);
  } else {
    if (w[GRAPH_AHEAD] != n) rc = launch_graph(graphs, words, n);
    __threadfence_system();  // what earlier tiles wrote, in memory before the copy engine reads it
    w[GRAPH_GATE] = n;
    if (rc == 0u && graph_ahead) {  // the next copy's launch, while this one moves
      rc = launch_graph(graphs, words, n + 1ull);
      if (rc == 0u) w[GRAPH_AHEAD] = n + 1ull;
    }
  }
  if (rc != 0u) return rc;
  const unsigned long long t0 = arkdma::now_ns();
  while (w[0] < n)
    if (arkdma::now_ns() - t0 > budget_ns) return GRAPH_WAIT_TIMEOUT;
  return 0u;
}

/* Thread 0 of every CTA as it leaves: any gate still shut on a launch made ahead is opened, so the launch ends (the
 * kernel's graph is complete only when it has). The CTA that launched it runs this after the launch. */
__device__ __forceinline__ void open_gates(const int4* copies, int num_ops, unsigned long long* graph_words) {
  for (int op = 0; op < num_ops; ++op) {
    if (copies[op].x != 2 || copies[op].z == 0) continue;
    unsigned long long* words = graph_words + copies[op].y * GRAPH_WORDS;
    const unsigned long long ahead = *(volatile unsigned long long*)(words + GRAPH_AHEAD);
    if (ahead > *(volatile unsigned long long*)(words + GRAPH_GATE)) {
      __threadfence_system();
      atomicMax(words + GRAPH_GATE, ahead);
    }
  }
}
#endif

}  // namespace ark

#endif
