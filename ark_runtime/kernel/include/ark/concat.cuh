/* The concat op (ops/concat.py): out row r = a's row r (a_cols wide) followed by b's (b_cols wide), for the tile's
 * rows [r0, r1) and columns [c0, c1) of the output's 2-D view, values moved as they are. */
#ifndef ARK_CONCAT_CUH
#define ARK_CONCAT_CUH

namespace ark {

template <typename T>
__device__ void concat_tile(const T* a, const T* b, T* out, int a_cols, int b_cols, int r0, int r1, int c0, int c1) {
  const int w = c1 - c0, cols = a_cols + b_cols;
  const long long n = (long long)(r1 - r0) * w;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    const int r = r0 + (int)(i / w), c = c0 + (int)(i % w);
    out[(long long)r * cols + c] = c < a_cols ? a[(long long)r * a_cols + c] : b[(long long)r * b_cols + (c - a_cols)];
  }
}

}  // namespace ark

#endif
