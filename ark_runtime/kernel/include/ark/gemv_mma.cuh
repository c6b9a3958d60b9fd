/* Skinny matmul tile on tensor cores: out[r0:r0+M, c0:c1] = A[r0:r0+M, :] @ B[:, c0:c1] for a few rows of bf16 or
 * fp16 (4 < M <= 16, a batch of tokens), fp32 accumulation, rounded once when stored.
 *
 * gemv.cuh streams the weights B through FMA units; from about 8 rows its multiplies, not the memory, set its
 * pace. Padding M to a wgmma block instead (matmul_sm90.cuh) wastes 7/8 of a 64-row fragment and reads B through
 * the wgmma pipeline. Here the operands are swapped: out^T = B^T A^T, so B's columns are the rows of a warp-level
 * mma.m16n8k16 (16 columns of the output each) and A's M rows, padded to 8 or 16, its N. B's 16 KiB slices stream
 * through shared memory exactly as in gemv.cuh (cp.async, STAGES in flight); per slice a warp issues 4 x M/8
 * mma and their ldmatrix loads, so the tile runs at the memory's pace for every M up to 16.
 *
 * Layout: a slice is B [KS][W] (KS x W x 2 bytes = 16 KiB) then A [MP][KS]. Both are stored in 16-byte units
 * swizzled against ldmatrix's bank conflicts: unit u of a row r sits at u ^ swizzle(r), so the 8 rows an 8x8
 * matrix load reads fall in 8 different 16-byte bank groups. B's fragments are loaded transposed (ldmatrix.trans:
 * B is K-major, the mma's A operand wants its rows, B's columns); A's rows are the mma's column-major B operand as
 * they stand. A's padding rows (M to MP - 1) are zeroed once, at the tile's start, and never copied.
 * Warps: W / 16 column blocks, each taken by 8 / (W / 16) warps that split the slice's 16-deep steps; at the end
 * their sums meet in shared memory, are added, and every output is stored once, a row's columns by adjacent
 * threads. The generated code uses it only where K, N and A's row stride are multiples of 8 (16-byte copies);
 * elsewhere gemv.cuh's element-wise path runs.
 */
#ifndef ARK_GEMV_MMA_CUH
#define ARK_GEMV_MMA_CUH

#include "gemv.cuh"  // GEMV_THREADS, GEMV_WARPS, SlicePipe, cp_async16, cp_async_wait
#include "numeric.cuh"

namespace ark {

constexpr int GEMV_MMA_SLICE_BYTES = 16 * 1024;  // B per slice

/* M rows (padded to MP), W columns of T: KS rows of B per slice; a slice holds `b` elements of B, then `a` of A. */
template <typename T, int M, int W>
struct GemvMmaShape {
  static constexpr int MP = (M + 7) / 8 * 8, NB = MP / 8;  // the mma's N blocks of 8 rows of A
  static constexpr int KS = GEMV_MMA_SLICE_BYTES / (W * (int)sizeof(T));
  static constexpr int U = W * (int)sizeof(T) / 16, AU = KS * (int)sizeof(T) / 16;  // 16-byte units per row of B, A
  static constexpr int WB = W / 16, KW = GEMV_WARPS / WB;  // column blocks; warps per block, splitting K
  static constexpr int STEPS = KS / 16 / KW;  // 16-deep steps per warp per slice
  static constexpr int b = KS * W, a = MP * KS, both = a + b;
};

/* Shared memory the template needs, in bytes: STAGES slices, or every warp's sums. */
template <typename T, int M, int W, int STAGES>
__host__ __device__ constexpr int gemv_mma_smem() {
  using S = GemvMmaShape<T, M, W>;
  const int slices = STAGES * S::both * (int)sizeof(T);
  const int sums = S::KW * S::MP * W * (int)sizeof(float);
  return slices > sums ? slices : sums;
}

/* The 16-byte unit where unit u of row r of a row-major array with UPR units a row is stored: 8 consecutive rows'
 * units u fall in 8 different 16-byte bank groups of 128 bytes. */
template <int UPR>
__device__ __forceinline__ int swizzled(int r, int u) {
  if constexpr (UPR >= 8) {
    return r * UPR + (u ^ (r & 7));
  } else {
    static_assert(8 % UPR == 0, "a row's units divide 128 bytes");
    constexpr int RG = 8 / UPR;  // rows per 128 bytes
    return r * UPR + (u ^ ((r / RG) & (UPR - 1)));
  }
}

template <typename T> struct MmaKind;
template <> struct MmaKind<__nv_bfloat16> {
  __device__ __forceinline__ static void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <> struct MmaKind<__half> {
  __device__ __forceinline__ static void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s)
               : "memory");  // not hoisted above the barrier that makes the slice visible
}

__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], const void* p) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(s) : "memory");
}

/* One thread's share of copying slice rows k0 .. k0 + KS - 1 of B's columns c0 .. c1 - 1 and A's M rows, at places
 * fixed for the tile: B's unit u of rows rb, rb + BSTEP, ... and A's unit ua of rows ma, ma + ASTEP, ... Each step
 * is a multiple of 8 rows, so a thread's units keep their swizzled place in every row it copies. */
template <typename T, int M, int W>
struct GemvMmaCopy {
  using S = GemvMmaShape<T, M, W>;
  static constexpr int E = 16 / (int)sizeof(T);
  static constexpr int BSTEP = GEMV_THREADS / S::U, BN = S::KS / BSTEP;  // B: rows apart, units per thread
  static constexpr int ASTEP = GEMV_THREADS / S::AU, AN = (M + ASTEP - 1) / ASTEP;
  static_assert(GEMV_THREADS % S::U == 0 && S::KS % BSTEP == 0 && BSTEP % 8 == 0, "fixed places for B");
  static_assert(GEMV_THREADS % S::AU == 0 && ASTEP % 8 == 0, "fixed places for A");
  const T* a0;  // the matrices, for the copies that only zero-fill
  const T* b0;
  const T* a;  // the thread's first unit of A (at k = 0) and of B (row 0)
  const T* b;
  int n, k, lda;
  int rb, sbo, ma, ka, sao;  // B's first row and its place in a slice; A's first row, its k, its place (after B)
  bool bin;  // the thread's columns of B are in the tile

  __device__ GemvMmaCopy(const T* a_, const T* b_, int n_, int k_, int lda_, int r0, int c0, int c1)
      : a0(a_), b0(b_), n(n_), k(k_), lda(lda_) {
    rb = threadIdx.x / S::U;
    const int u = threadIdx.x % S::U;
    sbo = swizzled<S::U>(rb, u) * E;
    bin = c0 + u * E < c1;
    b = b_ + ((long long)rb * n + c0 + u * E);
    ma = threadIdx.x / S::AU;
    const int ua = threadIdx.x % S::AU;
    ka = ua * E;
    sao = S::b + swizzled<S::AU>(ma, ua) * E;
    a = a_ + ((long long)(r0 + ma) * lda + ka);
  }

  __device__ __forceinline__ void operator()(T* s, int k0) const {
    weights(s, k0);
    rows(s, k0);
  }

  __device__ __forceinline__ void weights(T* s, int k0) const {  // B's part of the slice
#pragma unroll
    for (int j = 0; j < BN; ++j) {
      const bool in = bin && k0 + rb + j * BSTEP < k;
      cp_async16(s + sbo + j * BSTEP * W, in ? b + (long long)(k0 + j * BSTEP) * n : b0, in);
    }
  }

  __device__ __forceinline__ void rows(T* s, int k0) const {  // A's part
    const bool in = k0 + ka < k;
#pragma unroll
    for (int j = 0; j < AN; ++j)
      if (ma + j * ASTEP < M)
        cp_async16(s + sao + j * ASTEP * S::KS, in ? a + (long long)j * ASTEP * lda + k0 : a0, in);
  }
};

/* Every thread of the CTA: the tile's M x (c1 - c0) outputs (see the top of this file), over K = k with A's rows
 * lda apart (a split-K part: A and B from the part's first k, `out` the part's fp32 sums). K, N, lda, c0 and c1
 * are multiples of 8. `mode` (gemv.cuh's TileMode): TILE_PRELOAD issues B's part of the first STAGES - 1 slices
 * and returns, TILE_PRELOADED runs the tile after it. */
template <typename T, int M, int W, int STAGES, typename TO, typename Epi = NoEpi>
__device__ void gemv_mma_tile(const T* a, const T* b, TO* out, int n, int k, int lda, int r0, int c0, int c1,
                              unsigned char* smem, int mode = TILE_RUN, const Epi& epi = Epi()) {
  using S = GemvMmaShape<T, M, W>;
  static_assert(sizeof(T) == 2, "bf16 or fp16");
  static_assert(M > 0 && M <= 16, "at most 16 rows");
  static_assert(W % 16 == 0 && GEMV_WARPS % S::WB == 0 && (S::KS / 16) % S::KW == 0, "whole blocks and steps");
  static_assert(S::AU >= 8, "A's rows are 128 bytes or more a slice");
  T* base = (T*)smem;
  const GemvMmaCopy<T, M, W> copy(a, b, n, k, lda, r0, c0, c1);
  const SlicePipe<STAGES, S::both, S::KS, T, decltype(copy)> pipe{base, (k + S::KS - 1) / S::KS, copy};
  if (mode == TILE_PRELOAD) {
    pipe.start(mode);
    return;
  }
  if constexpr (S::MP > M) {  // A's padding rows: zero in every buffer, never copied
    for (int i = threadIdx.x; i < STAGES * (S::MP - M) * S::KS; i += GEMV_THREADS) {
      const int st = i / ((S::MP - M) * S::KS), j = i % ((S::MP - M) * S::KS);
      base[st * S::both + S::b + M * S::KS + j] = from_float<T>(0.0f);
    }
  }
  pipe.start(mode);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int cb = warp % S::WB, kw = warp / S::WB;  // this warp's 16 columns and its share of each slice's steps
  float acc[S::NB][4];
#pragma unroll
  for (int j = 0; j < S::NB; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
  // ldmatrix row addresses: B's (transposed, x4) rows k (lanes 16-31 the step's second 8) of units 2cb, 2cb + 1;
  // A's (x2) rows m of the step's two units (lanes 8-15 the second).
  const int bk = (lane & 7) + (lane >> 4 << 3), bu = cb * 2 + (lane >> 3 & 1);
  const int am = lane & 7, au = lane >> 3 & 1;
  for (int s = 0; s < pipe.slices; ++s) {
    const T* sb = pipe.step(s);
    const T* sa = sb + S::b;
#pragma unroll
    for (int j = 0; j < S::STEPS; ++j) {
      const int k16 = (kw + j * S::KW) * 16;
      unsigned fw[4];  // the mma's A: 16 columns of B by 16 k
      ldmatrix_x4_trans(fw, sb + swizzled<S::U>(k16 + bk, bu) * 8);
#pragma unroll
      for (int nb = 0; nb < S::NB; ++nb) {
        unsigned fx[2];  // its B: 16 k by 8 rows of A
        ldmatrix_x2(fx, sa + swizzled<S::AU>(nb * 8 + am, k16 / 8 + au) * 8);
        MmaKind<T>::run(acc[nb], fw, fx);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the slices: their space holds the sums, [KW][MP][W]
  float* sums = (float*)smem;
  // acc[nb][e]: column cb * 16 + lane / 4 (+ 8 for e >= 2) of row nb * 8 + 2 (lane % 4) (+ 1 for odd e)
#pragma unroll
  for (int nb = 0; nb < S::NB; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int m = nb * 8 + 2 * (lane & 3) + (e & 1), c = cb * 16 + (lane >> 2) + (e >> 1) * 8;
      sums[(kw * S::MP + m) * W + c] = acc[nb][e];
    }
  __syncthreads();
  for (int i = threadIdx.x; i < M * W; i += GEMV_THREADS) {  // every output stored once, a row's columns together
    const int m = i / W, c = i % W;
    if (c0 + c < c1) {
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < S::KW; ++w) v += sums[(w * S::MP + m) * W + c];
      const long long f = (long long)(r0 + m) * n + c0 + c;
      st(out, f, epi(v, f));
    }
  }
}

}  // namespace ark

#endif
