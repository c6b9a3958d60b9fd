/* Elementwise op templates over a tile (rows [r0, r1), columns [c0, c1) of the output's 2-D view).
 * Broadcasting is an index map the generated code supplies: `In::at(flat)` turns the output's flat
 * index into the input's. */
#ifndef ARK_ELEMENTWISE_CUH
#define ARK_ELEMENTWISE_CUH

#include "numeric.cuh"

namespace ark {

struct Same {
  static __device__ __forceinline__ long long at(long long flat) { return flat; }
};

constexpr int ILP = 8;  // elements per thread in flight: one at a time leaves a tile waiting on latency

/* out[flat] = fn(flat) for the tile's elements [0, n), U at once per thread, computed step by step across all of
 * them (`Fn::batch`), with no branch between: an index past the tile is clamped to the tile's last element and
 * computed but not stored, so the compiler overlaps the U chains. ROWS: the tile is whole rows (w == cols), so
 * element i is at r0 * cols + i, with no division by the tile's width. */
template <int U, bool ROWS, typename T, typename Fn>
__device__ __forceinline__ void map_span(const Fn& fn, T* out, int cols, int r0, int c0, int w, int n) {
  const long long base = (long long)r0 * cols;
  for (int i0 = threadIdx.x; i0 < n; i0 += U * blockDim.x) {
    long long f[U];
    float v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = min(i0 + u * (int)blockDim.x, n - 1);
      f[u] = ROWS ? base + i : (long long)(r0 + i / w) * cols + c0 + i % w;
    }
    fn.batch(f, v);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u * (int)blockDim.x < n) st(out, f[u], v[u]);
  }
}

/* out[flat] = fn(flat) over the tile. ILP elements per thread in flight; a tile of at most one element per thread
 * takes one (the other ILP - 1 would be clamped copies of the last element, whose index arithmetic, loads and math
 * all run before the one real element's store: on an H100 that made a 256-element tile, one task of tasks1000,
 * take 0.58 us). */
template <typename T, typename Fn>
__device__ void map_tile(const Fn& fn, T* out, int cols, int r0, int r1, int c0, int c1) {
  const int w = c1 - c0;
  const int n = (r1 - r0) * w;
  const bool rows = w == cols;
  if (n <= (int)blockDim.x) {
    if (rows) map_span<1, true>(fn, out, cols, r0, c0, w, n);
    else map_span<1, false>(fn, out, cols, r0, c0, w, n);
  } else if (rows) {
    map_span<ILP, true>(fn, out, cols, r0, c0, w, n);
  } else {
    map_span<ILP, false>(fn, out, cols, r0, c0, w, n);
  }
}

/* `batch` for a functor of one element: each element in turn (the compiler interleaves a single op). */
#define ARK_BATCH_EACH                                                                  \
  template <int N>                                                                      \
  __device__ __forceinline__ void batch(const long long (&f)[N], float (&v)[N]) const { \
    _Pragma("unroll") for (int u = 0; u < N; ++u) v[u] = (*this)(f[u]);               \
  }

template <int F, typename T, typename In>
struct Unary {
  const T* x;
  __device__ __forceinline__ float operator()(long long f) const { return unary<F>(ld(x, In::at(f))); }
  ARK_BATCH_EACH
};

template <int F, typename T, typename A, typename B>
struct Binary {
  const T* a;
  const T* b;
  __device__ __forceinline__ float operator()(long long f) const { return binary<F>(ld(a, A::at(f)), ld(b, B::at(f))); }
  ARK_BATCH_EACH
};

template <int F, typename T, typename In>
__device__ void unary_tile(const T* x, T* out, int cols, int r0, int r1, int c0, int c1) {
  map_tile(Unary<F, T, In>{x}, out, cols, r0, r1, c0, c1);
}

template <int F, typename T, typename A, typename B>
__device__ void binary_tile(const T* a, const T* b, T* out, int cols, int r0, int r1, int c0, int c1) {
  map_tile(Binary<F, T, A, B>{a, b}, out, cols, r0, r1, c0, c1);
}

/* A split-K matmul's result (split_k.py): the sum of its S parts' fp32 sums, part s at p + s * part, in order s = 0,
 * 1, ... (the same bits every run), rounded once when stored. */
template <int S, typename Epi>
struct SplitSum {
  const float* p;
  long long part;
  Epi epi;
  __device__ __forceinline__ float operator()(long long f) const {
    float v = p[f];
#pragma unroll
    for (int s = 1; s < S; ++s) v += p[f + s * part];
    return epi(v, f);
  }
  ARK_BATCH_EACH
};

template <int S, typename T, typename Epi = NoEpi>
__device__ void split_sum_tile(const float* p, T* out, long long part, int cols, int r0, int r1, int c0, int c1,
                               const Epi& epi = Epi()) {
  map_tile(SplitSum<S, Epi>{p, part, epi}, out, cols, r0, r1, c0, c1);
}

/* x [..., S, D] with cos/sin [S, D/2]: the pair (2j, 2j+1) of row r turns by the angle of position r % S. */
template <typename T>
__device__ void rope_tile(const T* x, const T* cos_, const T* sin_, T* out, int seq, int cols, int r0, int r1, int c0,
                          int c1) {
  const int w = c1 - c0;
  const long long n = (long long)(r1 - r0) * w;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    const int r = r0 + (int)(i / w), c = c0 + (int)(i % w);
    const long long row = (long long)r * cols;
    const long long pair = (long long)(r % seq) * (cols / 2) + c / 2;
    const float x1 = ld(x, row + (c & ~1)), x2 = ld(x, row + (c | 1));
    const float cs = ld(cos_, pair), sn = ld(sin_, pair);
    st(out, row + c, (c & 1) ? x1 * sn + x2 * cs : x1 * cs - x2 * sn);
  }
}

/* x [..., S, heads * D] with cos/sin [S, D/2], each head's D columns turned by the angles of position r % S: with
 * HALF (Hugging Face's rotate_half) columns j and j + D/2 of a head by angle j, else columns 2j and 2j+1 (heads start
 * at multiples of D, which is even, so a pair never straddles two heads). Element by element: the tile reads the
 * whole heads it writes a part of (ops/rope.py). */
template <typename T, bool HALF>
__device__ void rope_heads_tile(const T* x, const T* cos_, const T* sin_, T* out, int seq, int cols, int head_dim,
                                int r0, int r1, int c0, int c1) {
  const int w = c1 - c0;
  const int half = head_dim / 2;
  const long long n = (long long)(r1 - r0) * w;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    const int r = r0 + (int)(i / w), c = c0 + (int)(i % w);
    const int j = c % head_dim;  // the column within its head
    const long long row = (long long)r * cols;
    const long long angles = (long long)(r % seq) * half;
    float y;
    if (HALF) {
      const int k = j < half ? j : j - half;  // the angle's index
      const long long first = row + (c - j) + k;  // column k of the head: the pair is (first, first + half)
      const float x1 = ld(x, first), x2 = ld(x, first + half);
      const float cs = ld(cos_, angles + k), sn = ld(sin_, angles + k);
      y = j < half ? x1 * cs - x2 * sn : x2 * cs + x1 * sn;
    } else {
      const int k = j / 2;
      const float x1 = ld(x, row + (c & ~1)), x2 = ld(x, row + (c | 1));
      const float cs = ld(cos_, angles + k), sn = ld(sin_, angles + k);
      y = (c & 1) ? x1 * sn + x2 * cs : x1 * cs - x2 * sn;
    }
    st(out, row + c, y);
  }
}

}  // namespace ark

#endif
