// The floor of a hand-over between the two CTAs of a thread-block cluster (H100), beside the same hand-over
// through GPU memory (the loop kernel's way today). Two CTAs of 256 threads pass a token back and forth;
// on its turn a CTA's thread 0 waits for the token, the CTA meets at a barrier, (with a tile) every thread reads
// the other CTA's last 256 floats, adds one and writes its own, the CTA meets again, and thread 0 passes the token.
//   mode 0: token through GPU memory (acquire poll, release add: gpu scope), tile through GPU memory
//   mode 1: token into the other CTA's shared memory (release store, acquire poll: cluster scope), tile through
//           GPU memory (loads from L2: ld.global.cg)
//   mode 2: token as in 1, tile through distributed shared memory (the other CTA's shared memory)
//   mode 3: token as in 1, no tile
//   mode 4: token as an arrival on the other CTA's mbarrier (release, cluster scope; the waiter's try_wait
//           acquires), tile through distributed shared memory
//   mode 5: token as in 4, no tile
//   mode 6: token as a relaxed store into the other CTA's shared memory, polled relaxed: no ordering at all (not
//           a usable hand-over; the signal's bare latency), no tile
// Prints us per hand-over (median of launches) and checks the last values (each hand-over adds one).
// nvcc -O3 -arch=sm_90a -o pingpong_cluster pingpong_cluster.cu && ./pingpong_cluster
#include <cooperative_groups.h>
#include <cstdio>
#include <vector>
#include <algorithm>

namespace cg = cooperative_groups;

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned ld_acquire_cluster(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.cluster.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_cluster(unsigned* p, unsigned v) {
  asm volatile("st.release.cluster.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release_gpu(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ bool mbar_try_wait(unsigned bar, unsigned parity) {
  unsigned ok;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; "
               "selp.u32 %0, 1, 0, p; }" : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok;
}
__device__ __forceinline__ void mbar_arrive_remote(unsigned cluster_bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar) : "memory");
}
__device__ __forceinline__ unsigned ld_relaxed_cluster(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.cluster.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed_cluster(unsigned* p, unsigned v) {
  asm volatile("st.relaxed.cluster.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

template <int MODE>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(256) pingpong(float* data, unsigned* gflags, int rounds,
                                                                          unsigned long long* ns) {
  __shared__ unsigned flag;
  __shared__ float tile[256];
  __shared__ alignas(8) unsigned long long bar;
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank(), peer = rank ^ 1;
  if (threadIdx.x == 0) {
    flag = rank == 0 ? 1u : 0u;
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bar)));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  tile[threadIdx.x] = 0.0f;
  cluster.sync();
  unsigned peer_bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(peer_bar) : "r"(smem_addr(&bar)), "r"(peer));
  unsigned* peer_flag = cluster.map_shared_rank(&flag, peer);
  const float* peer_tile = cluster.map_shared_rank(tile, peer);
  float* mine = data + rank * 256;
  const float* theirs = data + peer * 256;
  const unsigned long long t0 = now_ns();
  for (int i = 1; i <= rounds; ++i) {
    if (threadIdx.x == 0) {
      if constexpr (MODE == 0) {
        while (ld_acquire_gpu(gflags + rank) < (unsigned)i) {
        }
      } else if constexpr (MODE == 4 || MODE == 5) {
        const int phase = rank == 0 ? i - 2 : i - 1;  // rank 0's first turn waits for nothing
        if (phase >= 0)
          while (!mbar_try_wait(smem_addr(&bar), (unsigned)phase & 1u)) {
          }
      } else if constexpr (MODE == 6) {
        while (ld_relaxed_cluster(&flag) < (unsigned)i) {
        }
      } else {
        while (ld_acquire_cluster(&flag) < (unsigned)i) {
        }
      }
    }
    __syncthreads();
    if constexpr (MODE == 0 || MODE == 1) {
      mine[threadIdx.x] = __ldcg(theirs + threadIdx.x) + 1.0f;
    } else if constexpr (MODE == 2 || MODE == 4) {
      tile[threadIdx.x] = peer_tile[threadIdx.x] + 1.0f;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const unsigned next = rank == 0 ? (unsigned)i : (unsigned)i + 1;  // what the peer's turn i (or i + 1) waits for
      if constexpr (MODE == 0) {
        red_release_gpu(gflags + peer, 1u);
      } else if constexpr (MODE == 4 || MODE == 5) {
        mbar_arrive_remote(peer_bar);
      } else if constexpr (MODE == 6) {
        st_relaxed_cluster(peer_flag, next);
      } else {
        st_release_cluster(peer_flag, next);
      }
    }
  }
  const unsigned long long t1 = now_ns();
  if (threadIdx.x == 0) ns[rank] = t1 - t0;
  if constexpr (MODE == 2 || MODE == 4) data[rank * 256 + threadIdx.x] = tile[threadIdx.x];
  cluster.sync();  // no CTA leaves while the other may still read its shared memory
}

template <int MODE>
void run(const char* what, int rounds, int launches) {
  float* data;
  unsigned* gflags;
  unsigned long long* ns;
  cudaMalloc(&data, 512 * sizeof(float));
  cudaMalloc(&gflags, 2 * sizeof(unsigned));
  cudaMalloc(&ns, 2 * sizeof(unsigned long long));
  std::vector<double> us;
  bool ok = true;
  for (int l = 0; l < launches; ++l) {
    cudaMemset(data, 0, 512 * sizeof(float));
    const unsigned init[2] = {1u, 0u};
    cudaMemcpy(gflags, init, sizeof(init), cudaMemcpyHostToDevice);
    pingpong<MODE><<<2, 256>>>(data, gflags, rounds, ns);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      printf("%s: %s\n", what, cudaGetErrorString(err));
      return;
    }
    unsigned long long h[2];
    float v[512];
    cudaMemcpy(h, ns, sizeof(h), cudaMemcpyDeviceToHost);
    cudaMemcpy(v, data, sizeof(v), cudaMemcpyDeviceToHost);
    us.push_back(std::max(h[0], h[1]) / 1000.0 / (2.0 * rounds));
    if (MODE != 3 && MODE != 5 && MODE != 6)  // rank 0's last write saw rank 1's rounds - 1 hand-overs: values 2 * rounds - 1 and 2 * rounds
      for (int t = 0; t < 256; ++t) ok &= v[t] == 2.0f * rounds - 1 && v[256 + t] == 2.0f * rounds;
  }
  std::sort(us.begin(), us.end());
  printf("%-62s %.3f us per hand-over (range %.3f-%.3f, %d launches of %d rounds)%s\n", what, us[us.size() / 2],
         us.front(), us.back(), launches, rounds, (MODE == 3 || MODE == 5 || MODE == 6) ? "" : (ok ? ", values right" : ", VALUES WRONG"));
  cudaFree(data);
  cudaFree(gflags);
  cudaFree(ns);
}

int main() {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  printf("%s\n", prop.name);
  const int rounds = 20000, launches = 5;
  for (int pass = 0; pass < 2; ++pass) {
    run<0>("0: gpu-memory token, tile through L2", rounds, launches);
    run<1>("1: cluster token (DSMEM), tile through L2", rounds, launches);
    run<2>("2: cluster token (DSMEM), tile through DSMEM", rounds, launches);
    run<3>("3: cluster token (DSMEM), no tile", rounds, launches);
    run<4>("4: cluster mbarrier arrival, tile through DSMEM", rounds, launches);
    run<5>("5: cluster mbarrier arrival, no tile", rounds, launches);
    run<6>("6: relaxed store and poll (no ordering), no tile", rounds, launches);
  }
  return 0;
}
