/* Skinny matmul tile: out[r0:r0+M, c0:c1] = A[r0:r0+M, :] @ B[:, c0:c1] for few rows (M <= 16, a batch of
 * tokens), fp32 accumulation, rounded once when stored.
 *
 * With few rows the weights B [K, N] are the traffic (each element is used only M times), so this template
 * streams B once at the memory's pace instead of padding M to a tensor-core fragment. A tile owns W columns
 * for all M rows and all of K. B goes through shared memory in slices of KS rows (16 KiB of B: 64 bytes per
 * thread, four 16-byte cp.async, bypassing L1), with the slice's M x KS columns of A beside it; STAGES slices
 * in flight keep 48-64 KiB per SM on the way from memory while the threads multiply the oldest.
 *
 * Thread t owns CPT adjacent columns (g = t % G: one 8- or 16-byte shared load a row) and RPT consecutive rows
 * of each slice (from (t / G) x RPT), so a warp reads whole rows of B (at most a 2-way bank conflict where a
 * row is 64 bytes), one A value serves CPT columns and one 8-byte load brings the A values of a row m for 4 of
 * the thread's rows (2 in fp32). It keeps M x CPT sums (at most 64 registers; the generated code picks CPT).
 * At the end the lanes of a warp that hold the same columns are summed by shuffles, the warps through shared
 * memory (the slices' space, free by then), and every output is stored once.
 * VEC (K, N and A's row stride multiples of 16 bytes' worth of elements) copies 16 bytes at a time; else element by
 * element, as loads and stores (no cp.async) in the same pipeline. Rows of B past K, columns past c1 and A past K
 * are zero-filled, so any shape works.
 */
#ifndef ARK_GEMV_CUH
#define ARK_GEMV_CUH

#include "matmul.cuh"  // cp_async16, cp_async_commit, cp_async_wait
#include "numeric.cuh"

namespace ark {

constexpr int GEMV_THREADS = 256;  // the CTA's threads: the generated code asserts it is THREADS
constexpr int GEMV_WARPS = GEMV_THREADS / 32;

/* How the loop kernel calls a tile that streams weights (gemv.cuh, gemv_mma.cuh): TILE_PRELOAD, before the
 * tile's waits, only issues the copies of its first weight slices (no commit: they join the tile's first group
 * of copies); TILE_PRELOADED then runs the tile without issuing them again. The weights are an input no op
 * writes, so nothing the waits are for can change them. */
enum TileMode : int { TILE_RUN = 0, TILE_PRELOAD = 1, TILE_PRELOADED = 2 };

/* M rows, W columns, CPT columns and RPT rows (per slice) per thread: G threads across the columns, KL down the
 * rows, KS rows of B per slice; a slice holds `b` elements of B ([KS][W]) and then `a` of A ([M][KS]). */
template <int M, int W, int CPT, int RPT>
struct GemvShape {
  static constexpr int G = W / CPT, KL = GEMV_THREADS / G, KS = RPT * KL;
  static constexpr int b = KS * W, a = M * KS, both = a + b;
};

/* Shared memory the template needs, in bytes: STAGES slices, or the reduction's M x W sums per warp. */
template <typename T, int M, int W, int CPT, int RPT, int STAGES>
__host__ __device__ constexpr int gemv_smem() {
  const int slices = STAGES * GemvShape<M, W, CPT, RPT>::both * (int)sizeof(T);
  const int sums = GEMV_WARPS * M * W * (int)sizeof(float);
  return slices > sums ? slices : sums;
}

/* One thread's share of copying a slice (rows k0 .. k0 + KS - 1 of B's columns c0 .. c1 - 1, and of A's M rows)
 * into shared memory. VEC: 16-byte cp.async at places fixed for the tile: B's columns cb .. cb + E - 1 of slice
 * rows rb, rb + BSTEP, ...; A's columns ka .. ka + E - 1 of rows ma, ma + ASTEP, ... Else element by element. */
template <typename T, int M, int W, int CPT, int RPT, bool VEC>
struct GemvCopy {
  using S = GemvShape<M, W, CPT, RPT>;
  static constexpr int E = 16 / (int)sizeof(T);  // elements per copy; with VEC, K, N, c0 and c1 are multiples of it
  static constexpr int BROW = W / E, BN = S::b / E / GEMV_THREADS, BSTEP = GEMV_THREADS / BROW;
  static constexpr int AROW = S::KS / E, AN = (M * AROW + GEMV_THREADS - 1) / GEMV_THREADS,
                       ASTEP = GEMV_THREADS / AROW;
  static_assert(S::b % (E * GEMV_THREADS) == 0 && GEMV_THREADS % BROW == 0 && GEMV_THREADS % AROW == 0,
                "every thread copies the same places of every slice");
  const T* a;
  const T* b;
  int n, k, lda, r0, c0, c1;

  __device__ __forceinline__ void operator()(T* s, int k0) const {
    weights(s, k0);
    rows(s, k0);
  }

  __device__ __forceinline__ void weights(T* s, int k0) const {  // B's part of the slice
    T* sb = s;
    if constexpr (VEC) {
      const int rb = threadIdx.x / BROW, cb = threadIdx.x % BROW * E;
      const T* gb = b + ((long long)(k0 + rb) * n + c0 + cb);
#pragma unroll
      for (int j = 0; j < BN; ++j) {
        const bool in = k0 + rb + j * BSTEP < k && c0 + cb < c1;
        cp_async16(sb + (rb + j * BSTEP) * W + cb, in ? gb + (long long)j * BSTEP * n : b, in);
      }
    } else {
      for (int i = threadIdx.x; i < S::b; i += GEMV_THREADS) {
        const int r = i / W, c = i % W;
        sb[i] = k0 + r < k && c0 + c < c1 ? b[(long long)(k0 + r) * n + c0 + c] : from_float<T>(0.0f);
      }
    }
  }

  __device__ __forceinline__ void rows(T* s, int k0) const {  // A's part
    T* sa = s + S::b;
    if constexpr (VEC) {
      const int ma = threadIdx.x / AROW, ka = threadIdx.x % AROW * E;
      const T* ga = a + ((long long)(r0 + ma) * lda + k0 + ka);
      const bool in = k0 + ka < k;
#pragma unroll
      for (int j = 0; j < AN; ++j)
        if (ma + j * ASTEP < M)
          cp_async16(sa + (ma + j * ASTEP) * S::KS + ka, in ? ga + (long long)j * ASTEP * lda : a, in);
    } else {
      for (int i = threadIdx.x; i < S::a; i += GEMV_THREADS) {
        const int m = i / S::KS, kk = i % S::KS;
        sa[i] = k0 + kk < k ? a[(long long)(r0 + m) * lda + k0 + kk] : from_float<T>(0.0f);
      }
    }
  }
};

/* A weight-streaming tile's slices through shared memory (gemv.cuh, gemv_mma.cuh): `slices` slices of KS rows
 * of K, each BOTH elements at `base + buffer * BOTH`, STAGES of them in flight as cp.async groups. copy(buffer, k0)
 * is the calling thread's share of copying the slice that starts at k0 (copy.weights and copy.rows its B and A
 * parts). start() issues the first STAGES - 1; step(s) waits until slice s is in, starts slice s + STAGES - 1
 * into the buffer every thread is done with (an empty group past the last, so the waits keep their count) and
 * returns slice s's buffer. With TILE_PRELOAD, start issues only B's part of the first STAGES - 1 slices, with no
 * commit; with TILE_PRELOADED, their A parts, in the same groups as start() makes, the first taking the B parts
 * issued before. */
template <int STAGES, int BOTH, int KS, typename T, typename Copy>
struct SlicePipe {
  static_assert(STAGES >= 2, "two slices at least");
  T* base;
  int slices;
  const Copy& copy;

  __device__ __forceinline__ void start(int mode = TILE_RUN) const {
    if (mode == TILE_PRELOAD) {
      for (int s = 0; s < STAGES - 1 && s < slices; ++s) copy.weights(base + s * BOTH, s * KS);
      return;
    }
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < slices) {
        if (mode == TILE_PRELOADED)
          copy.rows(base + s * BOTH, s * KS);
        else
          copy(base + s * BOTH, s * KS);
      }
      cp_async_commit();
    }
  }

  __device__ __forceinline__ T* step(int s) const {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // slice s is in; every thread is done with slice s - 1, whose buffer is refilled next
    const int next = s + STAGES - 1;
    if (next < slices) copy(base + next % STAGES * BOTH, next * KS);
    cp_async_commit();
    return base + s % STAGES * BOTH;
  }
};

template <int BYTES> struct VecBits;
template <> struct VecBits<8> { using type = uint2; };
template <> struct VecBits<16> { using type = uint4; };

/* C consecutive elements from shared memory as float, in one 8- or 16-byte load. */
template <typename T, int C>
__device__ __forceinline__ void ld_floats(const T* p, float (&v)[C]) {
  union {
    typename VecBits<C * (int)sizeof(T)>::type bits;
    T e[C];
  } u;
  u.bits = *(const decltype(u.bits)*)p;
#pragma unroll
  for (int c = 0; c < C; ++c) v[c] = ld(u.e, c);
}

/* bf16 is the top half of a float: two to a word, one by a shift, the other by a mask (one instruction each;
 * element by element, the high one takes two). */
template <int C>
__device__ __forceinline__ void ld_floats(const __nv_bfloat16* p, float (&v)[C]) {
  union {
    typename VecBits<C * 2>::type bits;
    unsigned w[C / 2];
  } u;
  u.bits = *(const decltype(u.bits)*)p;
#pragma unroll
  for (int i = 0; i < C / 2; ++i) {
    v[2 * i] = __uint_as_float(u.w[i] << 16);
    v[2 * i + 1] = __uint_as_float(u.w[i] & 0xffff0000u);
  }
}

/* Every thread of the CTA: the tile's M x (c1 - c0) outputs (see the top of this file), over K = k with A's rows
 * lda apart (a split-K part: A and B from the part's first k, `out` the part's fp32 sums). `mode` as in SlicePipe:
 * TILE_PRELOAD issues B's part of the first slices and returns. */
template <typename T, int M, int W, int CPT, int RPT, int STAGES, bool VEC, typename TO, typename Epi = NoEpi>
__device__ void gemv_tile(const T* a, const T* b, TO* out, int n, int k, int lda, int r0, int c0, int c1,
                          unsigned char* smem, int mode = TILE_RUN, const Epi& epi = Epi()) {
  using S = GemvShape<M, W, CPT, RPT>;
  static_assert(CPT * sizeof(T) == 8 || CPT * sizeof(T) == 16, "a thread's columns are one 8- or 16-byte load");
  static_assert(W % CPT == 0 && 32 % S::G == 0, "a warp spans whole rows of the tile");
  static_assert(S::KS % (16 / sizeof(T)) == 0, "a slice's A rows are whole 16-byte copies");
  constexpr int JG = 8 / sizeof(T);  // rows multiplied at once: their A values of one row m are one 8-byte load
  static_assert(RPT % JG == 0, "whole groups of rows");
  const GemvCopy<T, M, W, CPT, RPT, VEC> copy{a, b, n, k, lda, r0, c0, c1};
  const SlicePipe<STAGES, S::both, S::KS, T, decltype(copy)> pipe{(T*)smem, (k + S::KS - 1) / S::KS, copy};
  pipe.start(mode);  // `mode`: TileMode (gemv.cuh's top)
  if (mode == TILE_PRELOAD) return;
  const int g = threadIdx.x % S::G, kl = threadIdx.x / S::G;
  float acc[M][CPT];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int c = 0; c < CPT; ++c) acc[m][c] = 0.0f;
  for (int s = 0; s < pipe.slices; ++s) {
    const T* slice = pipe.step(s);
    const T* sb = slice + kl * RPT * W + g * CPT;  // this thread's first row and column
    const T* sa = slice + S::b + kl * RPT;
#pragma unroll 1  // one group's values at a time: unrolled, the next group's loads are hoisted and sums spill
    for (int j0 = 0; j0 < RPT; j0 += JG) {
      float bv[JG][CPT];
#pragma unroll
      for (int j = 0; j < JG; ++j) ld_floats(sb + (j0 + j) * W, bv[j]);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float av[JG];
        ld_floats(sa + m * S::KS + j0, av);
#pragma unroll
        for (int j = 0; j < JG; ++j)
#pragma unroll
          for (int c = 0; c < CPT; ++c) acc[m][c] = fmaf(av[j], bv[j][c], acc[m][c]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every thread is done with the slices: their space holds the warps' sums now
  float* sums = (float*)smem;  // [GEMV_WARPS][M][W]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int c = 0; c < CPT; ++c) {
      float v = acc[m][c];
#pragma unroll
      for (int o = 16; o >= S::G; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);  // lanes with the same g
      if (lane < S::G) sums[(warp * M + m) * W + g * CPT + c] = v;
    }
  __syncthreads();
  for (int i = threadIdx.x; i < M * W; i += GEMV_THREADS) {
    const int m = i / W, c = i % W;
    if (c0 + c < c1) {
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < GEMV_WARPS; ++w) v += sums[(w * M + m) * W + c];
      const long long f = (long long)(r0 + m) * n + c0 + c;
      st(out, f, epi(v, f));
    }
  }
}

}  // namespace ark

#endif
