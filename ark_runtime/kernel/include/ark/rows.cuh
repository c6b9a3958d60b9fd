/* Row-wise op templates: reductions over the last axis, softmax, layernorm and RMSNorm.
 *
 * Reductions, softmax and the norms give each row a team of NT threads (a warp, up to the whole CTA; the generated
 * code picks NT from the row's length and the tile's rows, ops/blocks.py's row_team): the CTA works on TEAMS = 256 / NT
 * rows at a time. A thread holds its part of the row in registers as loaded, in 16-byte pieces (V elements) where
 * rows are 16-byte aligned (COLS a multiple of V), else element by element: piece c of a row (c = tid, tid + NT,
 * ...; consecutive threads, consecutive pieces) up to NV pieces (64 bytes, or 16 elements). A row that fits (the
 * slab is the whole row) is read from memory once: the thread's statistics, the team's reduction, then the output
 * from the same registers. A longer row is read in slabs of NV pieces, twice (statistics, then output).
 *
 * Statistics are combined exactly where they can be and stably where not: layernorm carries (count, mean, M2)
 * per thread (its own elements in two passes over registers) and combines them pairwise (Chan et al.), so mean
 * and variance come from one read and one reduction without the cancellation of sum and sum of squares; softmax
 * carries (max, sum of 2^((x - max) log2 e)) and rescales when combining. The team reduces by shuffles, then
 * (NT > 32) through 256 bytes of shared memory: one __syncthreads per row round, its slots alternating between
 * rounds so a fast warp's next write cannot meet a slow warp's read. Like the attention tile, these are
 * __noinline__ functions, so their registers are allocated apart from the loop kernel's other ops.
 */
#ifndef ARK_ROWS_CUH
#define ARK_ROWS_CUH

#include "numeric.cuh"

namespace ark {

enum Reduce : int { R_SUM, R_MAX, R_MEAN };

constexpr int ROW_THREADS = 256;
constexpr int ROW_WARPS = ROW_THREADS / 32;
constexpr int ROW_SMEM = 2 * ROW_WARPS * 4 * 4;  // bytes: two rounds' slots of 4 floats per warp

/* A row of COLS elements of T for a team of NT threads (ops/blocks.py's row_team mirrors V, MAXC). */
template <typename T, int COLS, int NT>
struct RowShape {
  static_assert(NT % 32 == 0 && ROW_THREADS % NT == 0, "a team is whole warps of the CTA");
  static constexpr int W = 16 / (int)sizeof(T);
  static constexpr int V = COLS % W == 0 ? W : 1;  // elements per load: rows 16-byte aligned, else one
  static constexpr int CHUNKS = COLS / V;          // pieces in a row
  static constexpr int CPT = (CHUNKS + NT - 1) / NT;
  static constexpr int MAXC = V > 1 ? 4 : 16;  // pieces a thread holds: 64 bytes, or 16 elements
  static constexpr int NV = CPT < MAXC ? CPT : MAXC;
  static constexpr int SLABS = (CPT + NV - 1) / NV;
  static constexpr int TEAMS = ROW_THREADS / NT, NTH = NT;
};

namespace rows {

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ float from_bits(unsigned short b);
template <> __device__ __forceinline__ float from_bits<__half>(unsigned short b) {
  return __half2float(__ushort_as_half(b));
}
template <> __device__ __forceinline__ float from_bits<__nv_bfloat16>(unsigned short b) {
  return __uint_as_float((unsigned)b << 16);
}
template <typename T> __device__ __forceinline__ unsigned bits(float v);
template <> __device__ __forceinline__ unsigned bits<__half>(float v) { return __half_as_ushort(__float2half_rn(v)); }
template <> __device__ __forceinline__ unsigned bits<__nv_bfloat16>(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

/* V consecutive elements of T as loaded: one 16-byte load (V * sizeof(T) == 16), or one element (V == 1). */
template <typename T, int V>
struct Raw {
  static_assert(V * sizeof(T) == 16, "16 bytes");
  uint4 u;
  // every path assigns (zeros where `in` is false): a conditionally assigned array goes to local memory
  __device__ __forceinline__ void load(const T* p, bool in) { u = in ? *(const uint4*)p : make_uint4(0u, 0u, 0u, 0u); }
  __device__ __forceinline__ unsigned word(int i) const { return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w; }
  __device__ __forceinline__ float at(int e) const {
    if constexpr (sizeof(T) == 4) {
      return __uint_as_float(word(e));
    } else {
      const unsigned w = word(e >> 1);
      return from_bits<T>((unsigned short)((e & 1) ? w >> 16 : w & 0xffffu));
    }
  }
};
template <typename T>
struct Raw<T, 1> {
  T v;
  __device__ __forceinline__ void load(const T* p, bool in) { v = in ? *p : from_float<T>(0.0f); }
  __device__ __forceinline__ float at(int) const { return to_f<T>(v); }
};

template <typename T, int V>
__device__ __forceinline__ void store(T* p, const float (&f)[V]) {
  if constexpr (V == 1) {
    *p = from_float<T>(f[0]);
  } else if constexpr (sizeof(T) == 4) {
    *(uint4*)p = make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
  } else {
    uint4 u;
    u.x = bits<T>(f[0]) | bits<T>(f[1]) << 16;
    u.y = bits<T>(f[2]) | bits<T>(f[3]) << 16;
    u.z = bits<T>(f[4]) | bits<T>(f[5]) << 16;
    u.w = bits<T>(f[6]) | bits<T>(f[7]) << 16;
    *(uint4*)p = u;
  }
}

__device__ __forceinline__ float ex2(float x) {  // 2^x; 2^-inf = +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
constexpr float L2E = 1.4426950408889634f;

/* Statistics of K floats combined pairwise (`C::combine(a, b)`, into a), across the team of NT threads: every
 * thread of the team ends with the team's combination. `round` alternates the shared-memory slots. */
template <int NT, int K, typename C>
__device__ __forceinline__ void team_reduce(float (&s)[K], float* red, int round, int thread) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float b[K];
#pragma unroll
    for (int k = 0; k < K; ++k) b[k] = __shfl_xor_sync(0xffffffffu, s[k], o);
    C::combine(s, b);
  }
  if constexpr (NT > 32) {
    const int warp = thread >> 5, lane = thread & 31;
    float* slot = red + (round & 1) * ROW_WARPS * 4;
    if (lane == 0) {
#pragma unroll
      for (int k = 0; k < K; ++k) slot[warp * 4 + k] = s[k];
    }
    __syncthreads();
    const int first = warp / (NT / 32) * (NT / 32);
#pragma unroll
    for (int k = 0; k < K; ++k) s[k] = slot[first * 4 + k];
#pragma unroll
    for (int w = 1; w < NT / 32; ++w) {
      float b[K];
#pragma unroll
      for (int k = 0; k < K; ++k) b[k] = slot[(first + w) * 4 + k];
      C::combine(s, b);
    }
  }
}

struct Sum {
  static __device__ __forceinline__ void combine(float (&a)[1], const float (&b)[1]) { a[0] += b[0]; }
};
struct Max {
  static __device__ __forceinline__ void combine(float (&a)[1], const float (&b)[1]) { a[0] = fmaxf(a[0], b[0]); }
};
/* (count, mean, M2): Chan et al.'s pairwise update; an empty side (count 0, mean 0, M2 0) changes nothing. */
struct Moments {
  static __device__ __forceinline__ void combine(float (&a)[3], const float (&b)[3]) {
    const float n = a[0] + b[0];
    const float f = __fdividef(b[0], fmaxf(n, 1.0f));
    const float d = b[1] - a[1];
    a[1] += d * f;
    a[2] += b[2] + d * d * a[0] * f;
    a[0] = n;
  }
};
/* (max, sum of 2^((x - max) log2 e)) */
struct SoftmaxStat {
  static __device__ __forceinline__ void combine(float (&a)[2], const float (&b)[2]) {
    const float m = fmaxf(a[0], b[0]);
    const float sa = a[0] == -ARK_INF ? 0.0f : a[1] * ex2((a[0] - m) * L2E);
    const float sb = b[0] == -ARK_INF ? 0.0f : b[1] * ex2((b[0] - m) * L2E);
    a[0] = m;
    a[1] = sa + sb;
  }
};

/* One slab (NV pieces) of row `row` for this thread: piece i is the row's piece tid + (slab * NV + i) * NT; pieces
 * past the row, or of a row past the tile (`live` false), are zeros read from nowhere (`safe`: an address inside
 * the tensor, for the predicated load's other side). */
template <typename T, typename S>
__device__ __forceinline__ void load_slab(rows::Raw<T, S::V> (&x)[S::NV], const T* row, const T* safe, bool live,
                                          int tid, int slab) {
#pragma unroll
  for (int i = 0; i < S::NV; ++i) {
    const int c = tid + (slab * S::NV + i) * S::NTH;
    const bool in = live && c < S::CHUNKS;
    x[i].load(in ? row + c * S::V : safe, in);
  }
}

}  // namespace rows

template <int R, typename T, int COLS, int NT>
__device__ __noinline__ void reduce_rows(const T* x, T* out, int r0, int r1, unsigned char* smem) {
  using S = RowShape<T, COLS, NT>;
  float* red = (float*)smem;
  const int th = threadIdx.x, team = th / NT, tid = th % NT;
  int round = 0;
  for (int rb = r0; rb < r1; rb += S::TEAMS, ++round) {
    const int r = rb + team;
    const bool live = r < r1;
    const T* row = x + (long long)r * COLS;
    float acc[1] = {R == R_MAX ? -ARK_INF : 0.0f};
#pragma unroll 1
    for (int slab = 0; slab < S::SLABS; ++slab) {
      rows::Raw<T, S::V> xv[S::NV];
      rows::load_slab<T, S>(xv, row, x, live, tid, slab);
#pragma unroll
      for (int i = 0; i < S::NV; ++i) {
        if (!live || tid + (slab * S::NV + i) * NT >= S::CHUNKS) continue;
#pragma unroll
        for (int e = 0; e < S::V; ++e) acc[0] = R == R_MAX ? fmaxf(acc[0], xv[i].at(e)) : acc[0] + xv[i].at(e);
      }
    }
    if constexpr (R == R_MAX) rows::team_reduce<NT, 1, rows::Max>(acc, red, round, th);
    else rows::team_reduce<NT, 1, rows::Sum>(acc, red, round, th);
    if (live && tid == 0) st(out, r, R == R_MEAN ? acc[0] * (1.0f / COLS) : acc[0]);
  }
}

template <typename T, int COLS, int NT>
__device__ __noinline__ void softmax_rows(const T* x, T* out, int r0, int r1, unsigned char* smem) {
  using S = RowShape<T, COLS, NT>;
  constexpr int V = S::V, NV = S::NV;
  float* red = (float*)smem;
  const int th = threadIdx.x, team = th / NT, tid = th % NT;
  int round = 0;
  for (int rb = r0; rb < r1; rb += S::TEAMS, ++round) {
    const int r = rb + team;
    const bool live = r < r1;
    const T* row = x + (long long)r * COLS;
    T* orow = out + (long long)r * COLS;
    float stat[2] = {-ARK_INF, 0.0f};
    rows::Raw<T, V> xv[NV];
#pragma unroll 1
    for (int slab = 0; slab < S::SLABS; ++slab) {
      rows::load_slab<T, S>(xv, row, x, live, tid, slab);
      float mine[2] = {-ARK_INF, 0.0f};
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        if (!live || tid + (slab * NV + i) * NT >= S::CHUNKS) continue;
#pragma unroll
        for (int e = 0; e < V; ++e) mine[0] = fmaxf(mine[0], xv[i].at(e));
      }
      if (mine[0] != -ARK_INF) {
#pragma unroll
        for (int i = 0; i < NV; ++i) {
          if (!live || tid + (slab * NV + i) * NT >= S::CHUNKS) continue;
#pragma unroll
          for (int e = 0; e < V; ++e) mine[1] += rows::ex2((xv[i].at(e) - mine[0]) * rows::L2E);
        }
      }
      rows::SoftmaxStat::combine(stat, mine);
    }
    rows::team_reduce<NT, 2, rows::SoftmaxStat>(stat, red, round, th);
    const float inv = __fdividef(1.0f, stat[1]);
#pragma unroll 1
    for (int slab = 0; slab < S::SLABS; ++slab) {
      if constexpr (S::SLABS > 1) rows::load_slab<T, S>(xv, row, x, live, tid, slab);
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const int c = tid + (slab * NV + i) * NT;
        if (!live || c >= S::CHUNKS) continue;
        float y[V];
#pragma unroll
        for (int e = 0; e < V; ++e) y[e] = rows::ex2((xv[i].at(e) - stat[0]) * rows::L2E) * inv;
        rows::store<T, V>(orow + c * V, y);
      }
    }
  }
}

/* layernorm (LAYER) (x - mean) / sqrt(var + eps) * w + b; else RMSNorm x / sqrt(mean(x^2) + eps) * w. */
template <typename T, bool LAYER, int COLS, int NT>
__device__ __noinline__ void norm_rows(const T* x, const T* w, const T* b, T* out, float eps, int r0, int r1,
                          unsigned char* smem) {
  using S = RowShape<T, COLS, NT>;
  constexpr int V = S::V, NV = S::NV, K = LAYER ? 3 : 1;
  float* red = (float*)smem;
  const int th = threadIdx.x, team = th / NT, tid = th % NT;
  rows::Raw<T, V> wv[NV], bv[NV];
  if constexpr (S::SLABS == 1) {  // the weights of this thread's pieces, for every row: loaded once, early
    rows::load_slab<T, S>(wv, w, w, true, tid, 0);
    if constexpr (LAYER) rows::load_slab<T, S>(bv, b, b, true, tid, 0);
  }
  int round = 0;
  for (int rb = r0; rb < r1; rb += S::TEAMS, ++round) {
    const int r = rb + team;
    const bool live = r < r1;
    const T* row = x + (long long)r * COLS;
    T* orow = out + (long long)r * COLS;
    float stat[K];
#pragma unroll
    for (int k = 0; k < K; ++k) stat[k] = 0.0f;
    rows::Raw<T, V> xv[NV];
#pragma unroll 1
    for (int slab = 0; slab < S::SLABS; ++slab) {
      rows::load_slab<T, S>(xv, row, x, live, tid, slab);
      float n = 0.0f, sum = 0.0f;
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        if (!live || tid + (slab * NV + i) * NT >= S::CHUNKS) continue;
        n += V;
#pragma unroll
        for (int e = 0; e < V; ++e) sum += LAYER ? xv[i].at(e) : xv[i].at(e) * xv[i].at(e);
      }
      if constexpr (LAYER) {
        float mine[3] = {n, n > 0.0f ? __fdividef(sum, n) : 0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < NV; ++i) {
          if (!live || tid + (slab * NV + i) * NT >= S::CHUNKS) continue;
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const float d = xv[i].at(e) - mine[1];
            mine[2] += d * d;
          }
        }
        rows::Moments::combine(stat, mine);
      } else {
        stat[0] += sum;
      }
    }
    float mean = 0.0f, inv;
    if constexpr (LAYER) {
      rows::team_reduce<NT, 3, rows::Moments>(stat, red, round, th);
      mean = stat[1];
      inv = rsqrtf(fmaxf(stat[2], 0.0f) * (1.0f / COLS) + eps);
    } else {
      rows::team_reduce<NT, 1, rows::Sum>(stat, red, round, th);
      inv = rsqrtf(stat[0] * (1.0f / COLS) + eps);
    }
#pragma unroll 1
    for (int slab = 0; slab < S::SLABS; ++slab) {
      if constexpr (S::SLABS > 1) {
        rows::load_slab<T, S>(xv, row, x, live, tid, slab);
        rows::load_slab<T, S>(wv, w, w, live, tid, slab);
        if constexpr (LAYER) rows::load_slab<T, S>(bv, b, b, live, tid, slab);
      }
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const int c = tid + (slab * NV + i) * NT;
        if (!live || c >= S::CHUNKS) continue;
        float y[V];
#pragma unroll
        for (int e = 0; e < V; ++e) {
          y[e] = (xv[i].at(e) - mean) * inv * wv[i].at(e);
          if constexpr (LAYER) y[e] += bv[i].at(e);
        }
        rows::store<T, V>(orow + c * V, y);
      }
    }
  }
}

}  // namespace ark

#endif
