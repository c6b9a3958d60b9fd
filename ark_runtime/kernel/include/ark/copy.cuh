/* The copy op from inside the loop kernel: by the CTA's own stores, or posted to a DMA engine's queue
 * through device.cuh by one thread, which then waits for its completion. */
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

}  // namespace ark

#endif
