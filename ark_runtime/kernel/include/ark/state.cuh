/* States written in place (ark_runtime/ops/write.py, count.py): rows of a value copied into a state at a row the
 * model gives or the GPU holds. */
#ifndef ARK_STATE_CUH
#define ARK_STATE_CUH

namespace ark {

/* Every thread of the CTA: value rows [v0, v1) (of n, `cols` elements each) into state rows row + v0 .. row + v1
 * (of state_rows). 0, or, where rows row .. row + n - 1 are not all in the state, row + 1 (1 for a row below 0):
 * nothing is written then. */
template <typename T>
__device__ __forceinline__ int write_rows(const T* value, T* state, int cols, int v0, int v1, long long row, int n,
                                          int state_rows) {
  if (row < 0 || row + n > state_rows) return row < 0 ? 1 : (int)(row + 1 < 0x7fffffff ? row + 1 : 0x7fffffff);
  const long long count = (long long)(v1 - v0) * cols;
  const T* src = value + (long long)v0 * cols;
  T* dst = state + (row + v0) * cols;
  for (long long i = threadIdx.x; i < count; i += blockDim.x) dst[i] = src[i];
  return 0;
}

/* Every thread of the CTA: value row i (of n, `cols` elements each) into state row i * stride + rows[i], rows[i] in
 * [0, stride): one position per sequence, each sequence's block `stride` rows. 0, or (where some rows[i] is outside
 * its block) that value's + 1 (1 for a value below 0): nothing is written then. */
template <typename T>
__device__ __forceinline__ int write_each_row(const T* value, T* state, int cols, const int* rows, int n, int stride) {
  __shared__ int bad;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int r = *(const volatile int*)(rows + i);
    if (r < 0 || r >= stride) atomicCAS(&bad, 0, r < 0 ? 1 : r + 1);
  }
  __syncthreads();
  if (bad) return bad;
  for (long long i = threadIdx.x; i < (long long)n * cols; i += blockDim.x) {
    const int v = (int)(i / cols);
    state[((long long)v * stride + rows[v]) * cols + i % cols] = value[i];
  }
  return 0;
}

}  // namespace ark

#endif
