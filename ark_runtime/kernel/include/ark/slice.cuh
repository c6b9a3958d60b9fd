/* The slice op (ops/slice.py): out[r][c] = x[r][start + c] for the tile's rows [r0, r1) and columns [c0, c1) of the
 * output's 2-D view (x's rows in_cols wide, the output's out_cols), values moved as they are. */
#ifndef ARK_SLICE_CUH
#define ARK_SLICE_CUH

namespace ark {

template <typename T>
__device__ void slice_tile(const T* x, T* out, int in_cols, int out_cols, int start, int r0, int r1, int c0, int c1) {
  const int w = c1 - c0;
  const long long n = (long long)(r1 - r0) * w;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    const int r = r0 + (int)(i / w), c = c0 + (int)(i % w);
    out[(long long)r * out_cols + c] = x[(long long)r * in_cols + start + c];
  }
}

}  // namespace ark

#endif
