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

template <int F, typename T, typename In>
__device__ void unary_tile(const T* x, T* out, int cols, int r0, int r1, int c0, int c1) {
  const int w = c1 - c0;
  const long long n = (long long)(r1 - r0) * w;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    const long long flat = (long long)(r0 + i / w) * cols + c0 + i % w;
    st(out, flat, unary<F>(ld(x, In::at(flat))));
  }
}

template <int F, typename T, typename A, typename B>
__device__ void binary_tile(const T* a, const T* b, T* out, int cols, int r0, int r1, int c0, int c1) {
  const int w = c1 - c0;
  const long long n = (long long)(r1 - r0) * w;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    const long long flat = (long long)(r0 + i / w) * cols + c0 + i % w;
    st(out, flat, binary<F>(ld(a, A::at(flat)), ld(b, B::at(flat))));
  }
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

}  // namespace ark

#endif
