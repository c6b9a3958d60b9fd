/* Just enough of CUDA for a row-wise op template to run on the host, one CTA of 256 threads as 256 std::threads:
 * threadIdx, __syncthreads (a barrier of all 256), the warp shuffles and ballots (a barrier of the warp's 32 around
 * an exchange of values), shared-memory atomicAdd, the bit casts and the fp16 / bf16 types. The templates' own headers are read unchanged;
 * rows.cuh, which the sample op needs only for the CTA's shape and the SFU's 2^x (inline PTX), is replaced here.
 * Every lane of a warp must reach a shuffle together, as the `0xffffffff` masks promise on the GPU. */
#ifndef ARK_CUDA_ON_HOST_H
#define ARK_CUDA_ON_HOST_H

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))

struct uint4 {
  unsigned x, y, z, w;
};
struct Dim3 {
  unsigned x, y, z;
};
inline thread_local Dim3 threadIdx{0, 0, 0};
inline const Dim3 blockDim{256, 1, 1};

struct __half {
  unsigned short x;
};
struct __nv_bfloat16 {
  unsigned short x;
};

inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
inline float __half2float(__half h) {  // exact: every fp16 value is a float
  const unsigned sign = (h.x >> 15) & 1u, exp = (h.x >> 10) & 31u, man = h.x & 1023u;
  float v = exp == 31 ? (man ? NAN : INFINITY) : exp == 0 ? std::ldexp((float)man, -24)
                                                         : std::ldexp((float)(man | 1024u), (int)exp - 25);
  return sign ? -v : v;
}
inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((unsigned)h.x << 16); }
inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
inline int __ffs(unsigned x) { return x ? __builtin_ctz(x) + 1 : 0; }
inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
using std::max;
using std::min;

/* The CTA being run: its barriers and the warps' exchange slots. */
struct HostCta {
  std::barrier<> all{256};
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  alignas(16) unsigned char slots[8][32][8];
  HostCta() {
    for (int w = 0; w < 8; ++w) warps.push_back(std::make_unique<std::barrier<>>(32));
  }
};
inline HostCta* host_cta = nullptr;

inline void __syncthreads() { host_cta->all.arrive_and_wait(); }

/* Every lane puts its value in; lane L gets the value of lane from(L) (its own where that is < 0). */
template <typename V, typename From>
V host_exchange(V v, From from) {
  static_assert(sizeof(V) <= 8, "a value of up to 8 bytes");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  std::memcpy(host_cta->slots[warp][lane], &v, sizeof(V));
  host_cta->warps[warp]->arrive_and_wait();
  V r = v;
  const int src = from(lane);
  if (src >= 0) std::memcpy(&r, host_cta->slots[warp][src], sizeof(V));
  host_cta->warps[warp]->arrive_and_wait();
  return r;
}
template <typename V> V __shfl_xor_sync(unsigned, V v, int o) {
  return host_exchange(v, [o](int lane) { return lane ^ o; });
}
template <typename V> V __shfl_up_sync(unsigned, V v, int o) {
  return host_exchange(v, [o](int lane) { return lane >= o ? lane - o : -1; });
}
template <typename V> V __shfl_sync(unsigned, V v, int src) {
  return host_exchange(v, [src](int) { return src; });
}
inline unsigned __ballot_sync(unsigned, bool p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  host_cta->slots[warp][lane][0] = p;
  host_cta->warps[warp]->arrive_and_wait();
  unsigned bits = 0;
  for (int l = 0; l < 32; ++l) bits |= (unsigned)(host_cta->slots[warp][l][0] != 0) << l;
  host_cta->warps[warp]->arrive_and_wait();
  return bits;
}

/* Runs body() as each of the CTA's 256 threads. */
inline void run_cta(const std::function<void()>& body) {
  HostCta cta;
  host_cta = &cta;
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 256; ++t)
    threads.emplace_back([t, &body] {
      threadIdx = Dim3{t, 0, 0};
      body();
    });
  for (auto& t : threads) t.join();
  host_cta = nullptr;
}

// rows.cuh, as much of it as argmax.cuh and sample.cuh use
#define ARK_ROWS_CUH
#define ARK_INF __int_as_float(0x7f800000)
namespace ark {
constexpr int ROW_THREADS = 256;
constexpr int ROW_WARPS = ROW_THREADS / 32;
constexpr int ROW_SMEM = 2 * ROW_WARPS * 4 * 4;
namespace rows {
inline float ex2(float x) { return std::exp2(x); }
}  // namespace rows
}  // namespace ark

#endif
