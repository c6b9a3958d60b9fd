/* Matmul tile: out[r0:r1, c0:c1] = A[r0:r1, :] @ B[:, c0:c1], fp32 accumulation.
 *
 * fp16/bf16 on tensor cores (WMMA 16x16x16), with A and B staged through shared memory in BK-deep slices,
 * STAGES of them in flight (cp.async: the next slices load while this one is multiplied; the generated code
 * picks STAGES from the tile's size). Rows, columns and K
 * that run past the matrix are zero-filled, so any shape works; VEC (K and N multiples of 8, chosen by the
 * generated code) loads 16 bytes at a time, else one element. Eight warps split the tile's 16x16 output
 * fragments into blocks (WarpGrid). fp32 runs on the FMA units from the same staged slices.
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

/* Shared memory rows are padded by 8 elements (16 bytes) so the fragment loads of consecutive rows fall in
 * different banks. */
constexpr int PAD = 8;

template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

/* One BK-deep slice of A (BM x BK) and B (BK x BN) into shared memory, starting at k0. */
template <typename T, int BM, int BN, bool VEC>
__device__ __forceinline__ void load_slice(const T* a, const T* b, T* sa, T* sb, int m, int n, int k, int r0, int c0,
                                           int k0) {
  constexpr int LDA = BK + PAD, LDB = BN + PAD;
  if constexpr (VEC) {
    constexpr int E = 16 / sizeof(T);
    for (int i = threadIdx.x; i < BM * BK / E; i += blockDim.x) {
      const int r = i / (BK / E), kk = (i % (BK / E)) * E;
      const bool in = r0 + r < m && k0 + kk < k;
      cp_async16(sa + r * LDA + kk, in ? a + (long long)(r0 + r) * k + k0 + kk : a, in);
    }
    for (int i = threadIdx.x; i < BK * BN / E; i += blockDim.x) {
      const int kk = i / (BN / E), c = (i % (BN / E)) * E;
      const bool in = k0 + kk < k && c0 + c < n;
      cp_async16(sb + kk * LDB + c, in ? b + (long long)(k0 + kk) * n + c0 + c : b, in);
    }
  } else {
    for (int i = threadIdx.x; i < BM * BK; i += blockDim.x) {
      const int r = i / BK, kk = i % BK;
      sa[r * LDA + kk] = (r0 + r < m && k0 + kk < k) ? a[(long long)(r0 + r) * k + k0 + kk] : from_float<T>(0.0f);
    }
    for (int i = threadIdx.x; i < BK * BN; i += blockDim.x) {
      const int kk = i / BN, c = i % BN;
      sb[kk * LDB + c] = (k0 + kk < k && c0 + c < n) ? b[(long long)(k0 + kk) * n + c0 + c] : from_float<T>(0.0f);
    }
  }
}

template <typename T> struct is_fp32 { static constexpr bool value = false; };
template <> struct is_fp32<float> { static constexpr bool value = true; };
template <typename T>
constexpr bool tensor_core = !is_fp32<T>::value;

template <int BM, int BK_, int BN>
struct SliceShape {
  static constexpr int a = BM * (BK_ + PAD), b = BK_ * (BN + PAD), both = a + b;
};

/* Shared memory the template needs, in bytes: STAGES slices, and a 16x16 float scratch per warp. */
template <typename T, int BM, int BN, int STAGES>
__host__ __device__ constexpr int matmul_smem() {
  return STAGES * SliceShape<BM, BK, BN>::both * (int)sizeof(T) + (tensor_core<T> ? WARPS * 256 * 4 : 0);
}

/* Warps in a WM x WN grid over the tile's FM x FN fragments, each warp a TM x TN block of them (its A
 * fragments reused across its columns, its B fragments across its rows). */
template <int FM, int FN>
struct WarpGrid {
  static constexpr int WM = FM >= 2 && FN >= 4 ? 2 : (FM < WARPS ? FM : WARPS);
  static constexpr int WN = WARPS / WM;
  static constexpr int TM = (FM + WM - 1) / WM, TN = (FN + WN - 1) / WN;
};

/* Slice s of the pipeline: waits until it is in shared memory, starts loading slice s + STAGES - 1 into the
 * buffer every warp has finished with, and returns slice s's A tile (its B tile follows at + Shape::a). */
template <typename T, int BM, int BN, int STAGES, bool VEC>
__device__ __forceinline__ const T* next_slice(const T* a, const T* b, T* base, int s, int slices, int m, int n,
                                               int k, int r0, int c0) {
  using Shape = SliceShape<BM, BK, BN>;
  cp_async_wait<STAGES - 2>();
  __syncthreads();  // slice s is in; every warp is done with the buffer refilled next
  const int next = s + STAGES - 1;
  if (next < slices) {
    T* nb = base + (next % STAGES) * Shape::both;
    load_slice<T, BM, BN, VEC>(a, b, nb, nb + Shape::a, m, n, k, r0, c0, next * BK);
  }
  cp_async_commit();
  return base + (s % STAGES) * Shape::both;
}

/* One part of a split-K matmul (split_k.py) where the wgmma tile is not compiled in: fp32 sums of A[r, 0:k] B[0:k, c]
 * (A's rows lda apart) by plain FMA. The runtime splits K only for the wgmma tile, compiled wherever it splits, so
 * this runs only in kernels built for other targets (CI's sm_90 build): correct, not fast. */
template <typename T>
__device__ void matmul_part_fma(const T* a, const T* b, float* out, int n, int k, int lda, int r0, int r1, int c0,
                                int c1) {
  const int w = c1 - c0;
  for (int i = threadIdx.x; i < (r1 - r0) * w; i += blockDim.x) {
    const int r = r0 + i / w, c = c0 + i % w;
    float acc = 0.0f;
    for (int kk = 0; kk < k; ++kk) acc += ld(a, (long long)r * lda + kk) * ld(b, (long long)kk * n + c);
    out[(long long)r * n + c] = acc;
  }
}

/* STAGES slices in flight: slice s is multiplied while slices s+1 .. s+STAGES-1 load (cp.async). */
template <typename T, int BM, int BN, int STAGES, bool VEC, typename Epi = NoEpi>
__device__ void matmul_tile(const T* a, const T* b, T* out, int m, int n, int k, int r0, int r1, int c0, int c1,
                            unsigned char* smem, const Epi& epi = Epi()) {
  static_assert(STAGES >= 2, "two slices at least");
  constexpr int LDA = BK + PAD, LDB = BN + PAD;
  using Shape = SliceShape<BM, BK, BN>;
  T* base = (T*)smem;
  const int slices = (k + BK - 1) / BK;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < slices) load_slice<T, BM, BN, VEC>(a, b, base + s * Shape::both, base + s * Shape::both + Shape::a, m, n, k, r0, c0, s * BK);
    cp_async_commit();
  }
  if constexpr (tensor_core<T>) {
    using namespace nvcuda;
    using G = WarpGrid<BM / 16, BN / 16>;
    constexpr int FM = BM / 16, FN = BN / 16;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp / G::WN, wn = warp % G::WN;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[G::TM][G::TN];
#pragma unroll
    for (int i = 0; i < G::TM; ++i)
#pragma unroll
      for (int j = 0; j < G::TN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    for (int s = 0; s < slices; ++s) {
      const T* xa = next_slice<T, BM, BN, STAGES, VEC>(a, b, base, s, slices, m, n, k, r0, c0);
      const T* xb = xa + Shape::a;
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[G::TM];
#pragma unroll
        for (int i = 0; i < G::TM; ++i)
          if (wm * G::TM + i < FM) wmma::load_matrix_sync(fa[i], xa + (wm * G::TM + i) * 16 * LDA + kk, LDA);
#pragma unroll
        for (int j = 0; j < G::TN; ++j) {  // one B fragment live at a time: registers for the accumulators
          if (wn * G::TN + j >= FN) continue;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
          wmma::load_matrix_sync(fb, xb + kk * LDB + (wn * G::TN + j) * 16, LDB);
#pragma unroll
          for (int i = 0; i < G::TM; ++i)
            if (wm * G::TM + i < FM) wmma::mma_sync(acc[i][j], fa[i], fb, acc[i][j]);
        }
      }
    }
    cp_async_wait<0>();
    float* scratch = (float*)(smem + STAGES * Shape::both * sizeof(T)) + warp * 256;
#pragma unroll
    for (int i = 0; i < G::TM; ++i)
#pragma unroll
      for (int j = 0; j < G::TN; ++j) {
        const int fr = wm * G::TM + i, fc = wn * G::TN + j;
        if (fr < FM && fc < FN) {
          wmma::store_matrix_sync(scratch, acc[i][j], 16, wmma::mem_row_major);
          __syncwarp();
          for (int e = lane; e < 256; e += 32) {
            const int r = r0 + fr * 16 + e / 16, c = c0 + fc * 16 + e % 16;
            const long long f = (long long)r * n + c;
            if (r < r1 && c < c1) st(out, f, epi(scratch[e], f));
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
      const T* xa = next_slice<T, BM, BN, STAGES, VEC>(a, b, base, s, slices, m, n, k, r0, c0);
      const T* xb = xa + Shape::a;
#pragma unroll
      for (int j = 0; j < PER; ++j) {
        const int e = threadIdx.x + j * 256;
        if (e < BM * BN) {
          const int r = e / BN, c = e % BN;
          float v = acc[j];
#pragma unroll 8
          for (int kk = 0; kk < BK; ++kk) v += xa[r * LDA + kk] * xb[kk * LDB + c];
          acc[j] = v;
        }
      }
    }
    cp_async_wait<0>();
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const int e = threadIdx.x + j * 256;
      const int r = r0 + e / BN, c = c0 + e % BN;
      const long long f = (long long)r * n + c;
      if (e < BM * BN && r < r1 && c < c1) st(out, f, epi(acc[j], f));
    }
  }
}

}  // namespace ark

#endif
