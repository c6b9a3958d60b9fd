/* Attention tile, flash-style: the queries [q0, q1) of one (batch, head) against keys [0, kv_end), with a
 * running max and sum (online softmax), so the scores are never stored. Keys and values come through shared
 * memory KB rows at a time (as float, rows padded by one word against bank conflicts); each warp owns query
 * rows, each lane one key of the block for the scores and D/32 output columns for the sum. */
#ifndef ARK_ATTENTION_CUH
#define ARK_ATTENTION_CUH

#include "numeric.cuh"

namespace ark {

constexpr int KB = 32;

template <int D>
__host__ __device__ constexpr int attention_smem() {
  return (2 * KB * (D + 1) + 8 * D) * 4;
}

template <typename T, int D, bool CAUSAL>
__device__ void attention_tile(const T* q, const T* k, const T* v, T* out, int seq, int cols, int base, int q0, int q1,
                               int col0, unsigned char* smem) {
  constexpr int P = (D + 31) / 32;  // output columns per lane
  float* sk = (float*)smem;
  float* sv = sk + KB * (D + 1);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  float* sq = sv + KB * (D + 1) + warp * D;
  const float scale = rsqrtf((float)D);
  const int kv_end = CAUSAL ? q1 : seq;
  const int rows_per_warp = (q1 - q0 + warps - 1) / warps;
  float m[4], l[4], acc[4][P];  // up to four query rows per warp (a 64-row tile over 8 warps: 8 rows; see below)
  for (int pass = 0; pass < rows_per_warp; pass += 4) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      m[j] = -ARK_INF;
      l[j] = 0.0f;
#pragma unroll
      for (int p = 0; p < P; ++p) acc[j][p] = 0.0f;
    }
    for (int kb = 0; kb < kv_end; kb += KB) {
      __syncthreads();
      for (int i = threadIdx.x; i < KB * D; i += blockDim.x) {
        const int r = i / D, c = i % D;
        const bool in = kb + r < kv_end;
        const long long g = (long long)(base + kb + r) * cols + col0 + c;
        sk[r * (D + 1) + c] = in ? ld(k, g) : 0.0f;
        sv[r * (D + 1) + c] = in ? ld(v, g) : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int qi = q0 + warp + (pass + j) * warps;  // this warp's row
        if (pass + j >= rows_per_warp || qi >= q1) continue;
        if (CAUSAL && kb > qi) continue;
        for (int c = lane; c < D; c += 32) sq[c] = ld(q, (long long)(base + qi) * cols + col0 + c) * scale;
        __syncwarp();
        const int key = kb + lane;
        float s = -ARK_INF;
        if (key < kv_end && (!CAUSAL || key <= qi)) {
          s = 0.0f;
#pragma unroll 16
          for (int c = 0; c < D; ++c) s += sq[c] * sk[lane * (D + 1) + c];
        }
        const float mb = warp_max(s);
        const float mn = fmaxf(m[j], mb);
        const float p = s == -ARK_INF ? 0.0f : expf(s - mn);
        const float corr = m[j] == -ARK_INF ? 0.0f : expf(m[j] - mn);
        l[j] = l[j] * corr + warp_sum(p);
        m[j] = mn;
#pragma unroll
        for (int pp = 0; pp < P; ++pp) acc[j][pp] *= corr;
        for (int t = 0; t < KB; ++t) {
          const float pt = __shfl_sync(0xffffffffu, p, t);
          if (pt != 0.0f) {
#pragma unroll
            for (int pp = 0; pp < P; ++pp) {
              const int c = lane + pp * 32;
              if (c < D) acc[j][pp] += pt * sv[t * (D + 1) + c];
            }
          }
        }
        __syncwarp();
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int qi = q0 + warp + (pass + j) * warps;
      if (pass + j >= rows_per_warp || qi >= q1) continue;
      const float inv = 1.0f / l[j];
#pragma unroll
      for (int pp = 0; pp < P; ++pp) {
        const int c = lane + pp * 32;
        if (c < D) st(out, (long long)(base + qi) * cols + col0 + c, acc[j][pp] * inv);
      }
    }
  }
}

}  // namespace ark

#endif
