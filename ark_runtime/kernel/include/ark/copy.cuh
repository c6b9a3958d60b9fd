/* The copy op from inside the loop kernel: by the CTA's own stores, posted to a DMA engine's queue through
 * device.cuh by one thread, or started on a copy engine by one thread launching a device graph built for it;
 * the thread then waits for its completion. */
#ifndef ARK_COPY_CUH
#define ARK_COPY_CUH

#include <arkdma/device.cuh>

namespace ark {

constexpr unsigned long long DMA_CHUNK = 1ull << 30;  // bytes per descriptor (the length field is 32 bits)

__device__ void sm_copy(const void* src, void* dst, unsigned long long n) {
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
__device__ unsigned dma_copy(const arkdma_queue& q, int src_region, int dst_region, unsigned long long n) {
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
 * instance k's token. */
constexpr int GRAPH_POOL = 4;
constexpr int GRAPH_WORDS = 2 + GRAPH_POOL;
constexpr unsigned GRAPH_WAIT_TIMEOUT = 1000u;  // fault detail: the graph launched but its token never landed

#if ARK_GRAPH_COPIES
/* Thread 0 only: launch the copy's next graph instance and wait for its token. 0, a cudaError_t of the launch, or
 * GRAPH_WAIT_TIMEOUT. Only the copy op's one tile runs this, always on the same CTA: words[1] has one writer. */
__device__ unsigned graph_copy(const unsigned long long* graphs, unsigned long long* words, unsigned long long budget_ns) {
  const unsigned long long n = words[1] + 1ull;
  words[1] = n;
  const int k = (int)(n % GRAPH_POOL);
  *(volatile unsigned long long*)(words + 2 + k) = n;
  __threadfence_system();  // the token, and what earlier tiles wrote, in memory before the copy engine reads them
  const cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)graphs[k], cudaStreamGraphFireAndForget);
  if (e != cudaSuccess) return (unsigned)e;
  const unsigned long long t0 = arkdma::now_ns();
  while (*(volatile unsigned long long*)words < n)
    if (arkdma::now_ns() - t0 > budget_ns) return GRAPH_WAIT_TIMEOUT;
  return 0u;
}
#endif

}  // namespace ark

#endif
