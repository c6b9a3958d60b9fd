/* Matmul tile: out[r0:r1, c0:c1] = A[r0:r1, :] @ B[:, c0:c1], fp32 accumulation.
 *
 * fp16/bf16 on tensor cores (WMMA 16x16x16), with A and B staged through shared memory in BK-deep slices,
 * two slices in flight (cp.async: the next slice loads while this one is multiplied). Rows, columns and K
 * that run past the matrix are zero-filled, so any shape works; VEC (K and N multiples of 8, chosen by the
 * generated code) loads 16 bytes at a time, else one element. Eight warps share the tile's 16x16 output
 * fragments round-robin. fp32 runs on the FMA units from the same staged slices.
 */
#ifndef ARK_MATMUL_CUH
#define ARK_MATMUL_CUH

#include <mma.h>

#include "numeric.cuh"

namespace ark {

constexpr int BK = 32;
constexpr int WARPS = 8;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool full) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  const int n = full ? 16 : 0;  // 0: zero-fill the 16 bytes
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_one() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

/* One BK-deep slice of A (BM x BK) and B (BK x BN) into shared memory, starting at k0. */
template <typename T, int BM, int BN, bool VEC>
__device__ __forceinline__ void load_slice(const T* a, const T* b, T* sa, T* sb, int m, int n, int k, int r0, int c0,
                                           int k0) {
  if constexpr (VEC) {
    constexpr int E = 16 / sizeof(T);
    for (int i = threadIdx.x; i < BM * BK / E; i += blockDim.x) {
      const int r = i / (BK / E), kk = (i % (BK / E)) * E;
      const bool in = r0 + r < m && k0 + kk < k;
      cp_async16(sa + r * BK + kk, in ? a + (long long)(r0 + r) * k + k0 + kk : a, in);
    }
    for (int i = threadIdx.x; i < BK * BN / E; i += blockDim.x) {
      const int kk = i / (BN / E), c = (i % (BN / E)) * E;
      const bool in = k0 + kk < k && c0 + c < n;
      cp_async16(sb + kk * BN + c, in ? b + (long long)(k0 + kk) * n + c0 + c : b, in);
    }
  } else {
    for (int i = threadIdx.x; i < BM * BK; i += blockDim.x) {
      const int r = i / BK, kk = i % BK;
      sa[i] = (r0 + r < m && k0 + kk < k) ? a[(long long)(r0 + r) * k + k0 + kk] : from_float<T>(0.0f);
    }
    for (int i = threadIdx.x; i < BK * BN; i += blockDim.x) {
      const int kk = i / BN, c = i % BN;
      sb[i] = (k0 + kk < k && c0 + c < n) ? b[(long long)(k0 + kk) * n + c0 + c] : from_float<T>(0.0f);
    }
  }
}

template <typename T> struct is_fp32 { static constexpr bool value = false; };
template <> struct is_fp32<float> { static constexpr bool value = true; };
template <typename T>
constexpr bool tensor_core = !is_fp32<T>::value;

/* Shared memory the template needs, in bytes. */
template <typename T, int BM, int BN>
__host__ __device__ constexpr int matmul_smem() {
  return 2 * (BM * BK + BK * BN) * (int)sizeof(T) + (tensor_core<T> ? WARPS * 256 * 4 : 0);
}

template <typename T, int BM, int BN, bool VEC>
__device__ void matmul_tile(const T* a, const T* b, T* out, int m, int n, int k, int r0, int r1, int c0, int c1,
                            unsigned char* smem) {
  T* sa[2] = {(T*)smem, (T*)smem + BM * BK};
  T* sb[2] = {(T*)smem + 2 * BM * BK, (T*)smem + 2 * BM * BK + BK * BN};
  const int slices = (k + BK - 1) / BK;
  load_slice<T, BM, BN, VEC>(a, b, sa[0], sb[0], m, n, k, r0, c0, 0);
  cp_async_commit();
  if constexpr (tensor_core<T>) {
    using namespace nvcuda;
    constexpr int FM = BM / 16, FN = BN / 16, F = FM * FN, PER = (F + WARPS - 1) / WARPS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) wmma::fill_fragment(acc[j], 0.0f);
    for (int s = 0; s < slices; ++s) {
      if (s + 1 < slices) load_slice<T, BM, BN, VEC>(a, b, sa[(s + 1) & 1], sb[(s + 1) & 1], m, n, k, r0, c0, (s + 1) * BK);
      cp_async_commit();
      cp_async_wait_one();
      __syncthreads();
      const T* xa = sa[s & 1];
      const T* xb = sb[s & 1];
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
#pragma unroll
        for (int j = 0; j < PER; ++j) {
          const int f = warp + j * WARPS;
          if (f < F) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
            wmma::load_matrix_sync(fa, xa + (f / FN) * 16 * BK + kk, BK);
            wmma::load_matrix_sync(fb, xb + kk * BN + (f % FN) * 16, BN);
            wmma::mma_sync(acc[j], fa, fb, acc[j]);
          }
        }
      }
      __syncthreads();
    }
    cp_async_wait_all();
    float* scratch = (float*)(smem + 2 * (BM * BK + BK * BN) * sizeof(T)) + warp * 256;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const int f = warp + j * WARPS;
      if (f < F) {
        wmma::store_matrix_sync(scratch, acc[j], 16, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
          const int r = r0 + (f / FN) * 16 + e / 16, c = c0 + (f % FN) * 16 + e % 16;
          if (r < r1 && c < c1) st(out, (long long)r * n + c, scratch[e]);
        }
        __syncwarp();
      }
    }
  } else {
    constexpr int PER = (BM * BN + 255) / 256;
    float acc[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) acc[j] = 0.0f;
    for (int s = 0; s < slices; ++s) {
      if (s + 1 < slices) load_slice<T, BM, BN, VEC>(a, b, sa[(s + 1) & 1], sb[(s + 1) & 1], m, n, k, r0, c0, (s + 1) * BK);
      cp_async_commit();
      cp_async_wait_one();
      __syncthreads();
      const T* xa = sa[s & 1];
      const T* xb = sb[s & 1];
#pragma unroll
      for (int j = 0; j < PER; ++j) {
        const int e = threadIdx.x + j * 256;
        if (e < BM * BN) {
          const int r = e / BN, c = e % BN;
          float v = acc[j];
#pragma unroll 8
          for (int kk = 0; kk < BK; ++kk) v += xa[r * BK + kk] * xb[kk * BN + c];
          acc[j] = v;
        }
      }
      __syncthreads();
    }
    cp_async_wait_all();
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const int e = threadIdx.x + j * 256;
      const int r = r0 + e / BN, c = c0 + e % BN;
      if (e < BM * BN && r < r1 && c < c1) st(out, (long long)r * n + c, acc[j]);
    }
  }
}

}  // namespace ark

#endif
