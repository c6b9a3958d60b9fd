// Kernels of `arkdma bench`: one GPU thread drives the engine through device.cuh, timed on the GPU clock.
#include "arkdma/device.cuh"

// `iterations` round trips of one descriptor each (post, then wait for its ticket); the first `warmup`
// are not recorded. ns[i], clk[i]: the round trip in globaltimer ns and clock64 cycles; post_clk[i]: the
// post() alone (slot stores, fence, doorbell); span[0..1]: the recorded loop in both units, to calibrate
// one against the other. result: {code, last ticket}.
extern "C" __global__ void latency(arkdma_queue q, uint16_t src_region, uint16_t dst_region, uint32_t bytes,
                                   uint64_t stride, uint64_t span_bytes, uint32_t iterations, uint32_t warmup,
                                   unsigned long long* ns, long long* clk, long long* post_clk,
                                   unsigned long long* span, unsigned long long* result) {
  if (threadIdx.x != 0) return;
  uint32_t rc = ARKDMA_DEV_OK;
  uint64_t ticket = 0, span_ns0 = 0;
  long long span_clk0 = 0;
  for (uint32_t i = 0; i < warmup + iterations && rc == ARKDMA_DEV_OK; ++i) {
    if (i == warmup) {
      span_ns0 = arkdma::now_ns();
      span_clk0 = clock64();
    }
    const uint64_t off = (i * stride) % span_bytes;
    const arkdma_descriptor d = arkdma::copy(src_region, off, dst_region, off, bytes, ARKDMA_FLAG_NOTIFY, i);
    const uint64_t t0 = arkdma::now_ns();
    const long long c0 = clock64();
    rc = arkdma::post(q, d, &ticket);
    const long long cp = clock64();
    if (rc == ARKDMA_DEV_OK) rc = arkdma::wait(q, ticket);
    const long long c1 = clock64();
    const uint64_t t1 = arkdma::now_ns();
    if (i >= warmup) {
      ns[i - warmup] = t1 - t0;
      clk[i - warmup] = c1 - c0;
      post_clk[i - warmup] = cp - c0;
    }
  }
  span[0] = arkdma::now_ns() - span_ns0;
  span[1] = clock64() - span_clk0;
  result[0] = rc;
  result[1] = ticket;
}

// `count` descriptors of `bytes`, at most `inflight` outstanding, posted `batch` at a time (NOTIFY on
// the last of each batch). Descriptor k moves (k * stride) % span_bytes on both sides: stride == bytes
// makes neighbours contiguous (the engine may merge them), a larger stride leaves gaps.
// result: {code, last ticket, elapsed ns, elapsed clock64, descriptors posted}.
extern "C" __global__ void throughput(arkdma_queue q, uint16_t src_region, uint16_t dst_region, uint32_t bytes,
                                      uint64_t stride, uint64_t span_bytes, uint32_t count, uint32_t inflight,
                                      uint32_t batch, unsigned long long* result) {
  if (threadIdx.x != 0) return;
  const uint64_t t0 = arkdma::now_ns();
  const long long c0 = clock64();
  uint64_t ticket = q.producer->posted;
  uint32_t sent = 0;
  uint32_t rc = arkdma::post_stream(
      q, count, batch, inflight,
      [&](uint32_t k) {
        const uint64_t off = (k * stride) % span_bytes;
        return arkdma::copy(src_region, off, dst_region, off, bytes, 0, k);
      },
      &ticket, &sent);
  if (rc == ARKDMA_DEV_OK) rc = arkdma::wait(q, ticket);
  result[0] = rc;
  result[1] = ticket;
  result[2] = arkdma::now_ns() - t0;
  result[3] = clock64() - c0;
  result[4] = sent;
}

// Posts `count` descriptors of `bytes` (contiguous, rotating over span_bytes) in one batch per window
// and returns without waiting for the last: the caller waits for `result[1]` (the ticket) elsewhere,
// e.g. on a stream with cuStreamWaitValue64, so no SM spins. result: {code, last ticket}.
extern "C" __global__ void post_all(arkdma_queue q, uint16_t src_region, uint16_t dst_region, uint32_t bytes,
                                    uint64_t span_bytes, uint32_t count, unsigned long long* result) {
  if (threadIdx.x != 0) return;
  arkdma_descriptor d[64];
  uint32_t rc = ARKDMA_DEV_OK, next = 0;
  uint64_t ticket = q.producer->posted;
  while (next < count && rc == ARKDMA_DEV_OK) {
    const uint32_t n = min(64u, count - next);
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t off = ((next + i) * static_cast<uint64_t>(bytes)) % span_bytes;
      d[i] = arkdma::copy(src_region, off, dst_region, off, bytes, next + i == count - 1 ? ARKDMA_FLAG_NOTIFY : 0);
    }
    rc = arkdma::post_batch(q, d, n, &ticket);
    next += n;
  }
  result[0] = rc;
  result[1] = ticket;
}

// The SM copy the interference benchmark compares with: every thread moves 16-byte words, grid-stride,
// `rounds` times over `bytes` (a multiple of 16) from src to dst (either may be mapped host memory).
extern "C" __global__ void sm_copy(const uint4* src, uint4* dst, unsigned long long words, uint32_t rounds) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (uint32_t r = 0; r < rounds; ++r)
    for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) dst[i] = src[i];
}
