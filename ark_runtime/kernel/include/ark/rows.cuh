/* Row-wise op templates (one warp per row): reductions over the last axis, softmax, layernorm, RMSNorm,
 * and the embedding gather, whose out-of-range id is reported instead of read. */
#ifndef ARK_ROWS_CUH
#define ARK_ROWS_CUH

#include "numeric.cuh"

namespace ark {

enum Reduce : int { R_SUM, R_MAX, R_MEAN };

template <int R, typename T>
__device__ void reduce_rows(const T* x, T* out, int cols, int r0, int r1) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int r = r0 + (threadIdx.x >> 5); r < r1; r += warps) {
    const T* row = x + (long long)r * cols;
    float acc = R == R_MAX ? -ARK_INF : 0.0f;
    for (int c = lane; c < cols; c += 32) acc = R == R_MAX ? fmaxf(acc, ld(row, c)) : acc + ld(row, c);
    acc = R == R_MAX ? warp_max(acc) : warp_sum(acc);
    if (lane == 0) st(out, r, R == R_MEAN ? acc / cols : acc);
  }
}

template <typename T>
__device__ void softmax_rows(const T* x, T* out, int cols, int r0, int r1) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int r = r0 + (threadIdx.x >> 5); r < r1; r += warps) {
    const T* row = x + (long long)r * cols;
    float m = -ARK_INF;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, ld(row, c));
    m = warp_max(m);
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) s += expf(ld(row, c) - m);
    const float inv = 1.0f / warp_sum(s);
    for (int c = lane; c < cols; c += 32) st(out, (long long)r * cols + c, expf(ld(row, c) - m) * inv);
  }
}

/* layernorm when B is non-null (x - mean) / sqrt(var + eps) * w + b; else RMSNorm x / sqrt(mean(x^2) + eps) * w. */
template <typename T, bool LAYER>
__device__ void norm_rows(const T* x, const T* w, const T* b, T* out, int cols, float eps, int r0, int r1) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int r = r0 + (threadIdx.x >> 5); r < r1; r += warps) {
    const T* row = x + (long long)r * cols;
    float mean = 0.0f;
    if (LAYER) {
      float s = 0.0f;
      for (int c = lane; c < cols; c += 32) s += ld(row, c);
      mean = warp_sum(s) / cols;
    }
    float q = 0.0f;
    for (int c = lane; c < cols; c += 32) {
      const float d = ld(row, c) - mean;
      q += d * d;
    }
    const float inv = rsqrtf(warp_sum(q) / cols + eps);
    for (int c = lane; c < cols; c += 32) {
      const float v = (ld(row, c) - mean) * inv * ld(w, c);
      st(out, (long long)r * cols + c, LAYER ? v + ld(b, c) : v);
    }
  }
}

/* out row r = table row ids[r]. Returns the first bad row's index + 1 (0 when every id was in range). */
template <typename T>
__device__ int embedding_rows(const T* table, const int* ids, T* out, int vocab, int cols, int r0, int r1) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  int bad = 0;
  for (int r = r0 + (threadIdx.x >> 5); r < r1; r += warps) {
    const int id = ids[r];
    if (id < 0 || id >= vocab) {
      bad = r + 1;
      continue;
    }
    for (int c = lane; c < cols; c += 32) out[(long long)r * cols + c] = table[(long long)id * cols + c];
  }
  return bad;
}

}  // namespace ark

#endif
