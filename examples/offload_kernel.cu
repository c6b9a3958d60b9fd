// A resident kernel that computes and offloads by itself. Each step every block fills its part of
// `act` (GPU memory); then block 0 posts a copy of `act` into the host buffer's slot for that step
// and a signal (IMM) that writes the step number to the host's flag once the data has landed.
// Before the next step overwrites `act`, block 0 waits for the copy and releases the other blocks.
#include "arkdma/device.cuh"

#define STOPPED 0xFFFFFFFFu

__device__ __forceinline__ uint32_t load_go(const unsigned int* go) { return atomicAdd(const_cast<unsigned int*>(go), 0u); }

// out[0] return code, out[1] last ticket; sync[0] steps released by block 0, sync[1] blocks arrived.
extern "C" __global__ void compute_and_offload(arkdma_queue q, float* act, uint32_t n, uint32_t steps,
                                               uint16_t act_region, uint16_t host_region, uint16_t flag_region,
                                               unsigned long long* out, unsigned int* sync) {
  __shared__ bool stop;
  const uint32_t per_block = n / gridDim.x;  // the host picks n as a multiple of the grid
  uint64_t ticket = 0;
  uint32_t rc = ARKDMA_DEV_OK;
  for (uint32_t step = 0; step < steps; ++step) {
    if (threadIdx.x == 0) {
      if (blockIdx.x == 0) {
        if (step > 0) rc = arkdma::wait(q, ticket);  // the copy of the last step has read `act`
        atomicExch(&sync[0], rc == ARKDMA_DEV_OK ? step + 1 : STOPPED);
      } else {
        uint32_t go;
        while ((go = load_go(&sync[0])) < step + 1) {
        }  // block 0 always releases or stops: its own waits are bounded
        rc = go == STOPPED ? ARKDMA_DEV_ABORTED : ARKDMA_DEV_OK;
      }
      stop = rc != ARKDMA_DEV_OK;
    }
    __syncthreads();
    if (stop) break;
    for (uint32_t i = threadIdx.x; i < per_block; i += blockDim.x) {
      const uint32_t k = blockIdx.x * per_block + i;
      act[k] = static_cast<float>(k) * 0.5f + static_cast<float>(step);
    }
    __threadfence();  // this block's writes are visible before block 0 hands `act` to the engine
    __syncthreads();
    if (threadIdx.x == 0) {
      atomicAdd(&sync[1], 1u);
      if (blockIdx.x == 0) {
        while (load_go(&sync[1]) < gridDim.x * (step + 1)) {
        }  // every block has finished this step (none of them waits on anything here)
        arkdma_descriptor d[2];
        d[0] = arkdma::copy(act_region, 0, host_region, static_cast<uint64_t>(step) * n * sizeof(float),
                            n * sizeof(float));
        d[1] = arkdma::immediate(flag_region, 0, step + 1);
        rc = arkdma::post_batch(q, d, 2, &ticket);
        if (rc != ARKDMA_DEV_OK) atomicExch(&sync[0], STOPPED);
      }
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    if (rc == ARKDMA_DEV_OK) rc = arkdma::wait(q, ticket);
    out[0] = rc;
    out[1] = ticket;
  }
}
