// Kernels the GPU tests run: GPU threads posting through device.cuh. One thread per block produces.
#include "arkdma/device.cuh"

// out[0..3] per block: return code, last ticket, elapsed ns, descriptors posted. Descriptor k copies
// `length` bytes from src_offset + k * src_stride to dst_offset + k * dst_stride (cookie k).
__device__ void stream(const arkdma_queue& q, uint16_t src_region, uint64_t src_offset, uint64_t src_stride,
                       uint16_t dst_region, uint64_t dst_offset, uint64_t dst_stride, uint32_t length, uint32_t count,
                       uint32_t batch, uint32_t inflight, unsigned long long* out) {
  const uint64_t t0 = arkdma::now_ns();
  uint64_t ticket = q.producer->posted;
  uint32_t sent = 0;
  uint32_t rc = arkdma::post_stream(
      q, count, batch, inflight,
      [&](uint32_t k) {
        return arkdma::copy(src_region, src_offset + k * src_stride, dst_region, dst_offset + k * dst_stride, length,
                            0, k);
      },
      &ticket, &sent);
  if (rc == ARKDMA_DEV_OK) rc = arkdma::wait(q, ticket);
  out[0] = rc;
  out[1] = ticket;
  out[2] = arkdma::now_ns() - t0;
  out[3] = sent;
}

extern "C" __global__ void stream_one(arkdma_queue q, uint16_t src_region, uint64_t src_offset, uint64_t src_stride,
                                      uint16_t dst_region, uint64_t dst_offset, uint64_t dst_stride, uint32_t length,
                                      uint32_t count, uint32_t batch, uint32_t inflight, unsigned long long* out) {
  if (threadIdx.x == 0)
    stream(q, src_region, src_offset, src_stride, dst_region, dst_offset, dst_stride, length, count, batch, inflight,
           out);
}

// Block b produces on queues[b]; its descriptors start b * block_stride bytes further on both sides.
extern "C" __global__ void stream_many(const arkdma_queue* queues, uint16_t src_region, uint16_t dst_region,
                                       uint64_t block_stride, uint32_t length, uint32_t count, uint32_t batch,
                                       uint32_t inflight, unsigned long long* out) {
  if (threadIdx.x != 0) return;
  const uint64_t base = blockIdx.x * block_stride;
  stream(queues[blockIdx.x], src_region, base, length, dst_region, base, length, length, count, batch, inflight,
         out + 4 * blockIdx.x);
}

// Posts the descriptors of `list` one post() each, then waits for the last ticket.
// out: return code of the first failing call (or OK), the ticket, descriptors posted.
extern "C" __global__ void post_list(arkdma_queue q, const arkdma_descriptor* list, uint32_t n,
                                     unsigned long long* out) {
  if (threadIdx.x != 0) return;
  uint32_t rc = ARKDMA_DEV_OK, i = 0;
  uint64_t ticket = q.producer->posted;
  for (; i < n && rc == ARKDMA_DEV_OK; ++i) rc = arkdma::post(q, list[i], &ticket);
  if (rc == ARKDMA_DEV_OK) rc = arkdma::wait(q, ticket);
  out[0] = rc;
  out[1] = ticket;
  out[2] = rc == ARKDMA_DEV_OK ? n : i - 1;
}

// Posts one descriptor, then poll()s until it is done: out = {last code, polls made}.
extern "C" __global__ void post_then_poll(arkdma_queue q, arkdma_descriptor d, unsigned long long* out) {
  if (threadIdx.x != 0) return;
  uint64_t ticket = 0;
  uint32_t rc = arkdma::post(q, d, &ticket);
  uint64_t looks = 0;
  const uint64_t t0 = arkdma::now_ns();
  while (rc == ARKDMA_DEV_OK || rc == ARKDMA_DEV_PENDING) {
    ++looks;
    rc = arkdma::poll(q, ticket);
    if (rc != ARKDMA_DEV_PENDING || arkdma::now_ns() - t0 > q.budget_ns) break;
  }
  out[0] = rc;
  out[1] = looks;
}

// Block 0 copies `length` bytes on `producer`, then signals `flag` (IMM) with `value`. Block 1 waits for
// the flag with wait_signal() (reporting on `waiter`) and counts the bytes of dst that differ from src.
// out: {block 0's code, block 1's code, mismatching bytes}.
extern "C" __global__ void signal_after_data(arkdma_queue producer, arkdma_queue waiter, uint16_t src_region,
                                             uint16_t dst_region, uint32_t length, uint16_t flag_region,
                                             uint64_t flag_offset, const uint64_t* flag, uint64_t value,
                                             const unsigned char* src, const unsigned char* dst,
                                             unsigned long long* out) {
  if (threadIdx.x != 0) return;
  if (blockIdx.x == 0) {
    uint32_t rc = arkdma::post(producer, arkdma::copy(src_region, 0, dst_region, 0, length));
    uint64_t ticket = 0;
    if (rc == ARKDMA_DEV_OK) rc = arkdma::signal(producer, flag_region, flag_offset, value, &ticket);
    if (rc == ARKDMA_DEV_OK) rc = arkdma::wait(producer, ticket);
    out[0] = rc;
  } else {
    const uint32_t rc = arkdma::wait_signal(waiter, flag, value);
    unsigned long long bad = 0;
    if (rc == ARKDMA_DEV_OK)
      for (uint32_t i = 0; i < length; ++i) bad += src[i] != reinterpret_cast<const volatile unsigned char*>(dst)[i];
    out[1] = rc;
    out[2] = bad;
  }
}
