/* The argmax op (ops/argmax.py): for each row of x, the column of its largest element as an int, NumPy's rule: the
 * lowest index among equals, -0 equal to +0, NaN above everything (so the first NaN wins).
 *
 * Elements are compared through an integer key made from their bits, not as floats: the kernels compile with -ftz,
 * which would make every subnormal compare equal to zero. A float is sign and magnitude, and for non-NaN values the
 * magnitude's bits grow with the value, so key = magnitude for a positive element and -magnitude for a negative one
 * orders them as their values (both zeros get key 0); a NaN (magnitude above infinity's) gets the largest key.
 *
 * A team of NT threads per row (rows.cuh's layout: ROW_THREADS / NT rows at a time, whole warps): each thread scans
 * its share of the row in column order keeping its best (key, column); the team combines them by shuffles, then
 * (NT > 32) through shared memory, its slots alternating between rows as rows.cuh's team_reduce does. Where rows
 * start on 16 bytes the share is 16-byte pieces tid, tid + NT, ..., ARGMAX_U loads in flight a thread (one SM reads a
 * decode step's 128k-column row in a few microseconds, not the hundred that one element a load takes); else columns
 * tid, tid + NT, .... */
#ifndef ARK_ARGMAX_CUH
#define ARK_ARGMAX_CUH

#include "rows.cuh"

namespace ark {

constexpr int ARGMAX_NAN_KEY = 0x7fffffff;
constexpr int ARGMAX_NONE_KEY = -0x7fffffff - 1;  // below every element's key (-0x7fffffff at least)
constexpr int ARGMAX_NONE_COL = 0x7fffffff;
static_assert(2 * ROW_WARPS * 2 * 4 <= ROW_SMEM, "argmax's slots fit the row ops' shared memory");

__device__ __forceinline__ int argmax_key(unsigned sign, unsigned magnitude, unsigned inf) {
  if (magnitude > inf) return ARGMAX_NAN_KEY;
  return sign ? -(int)magnitude : (int)magnitude;
}
__device__ __forceinline__ int argmax_key(float v) {
  const unsigned u = __float_as_uint(v);
  return argmax_key(u >> 31, u & 0x7fffffffu, 0x7f800000u);
}
__device__ __forceinline__ int argmax_key(__half v) {
  const unsigned u = __half_as_ushort(v);
  return argmax_key(u >> 15, u & 0x7fffu, 0x7c00u);
}
__device__ __forceinline__ int argmax_key(__nv_bfloat16 v) {
  const unsigned u = __bfloat16_as_ushort(v);
  return argmax_key(u >> 15, u & 0x7fffu, 0x7f80u);
}

/* Element e's bits of a 16-byte piece of T elements. */
template <typename T>
__device__ __forceinline__ unsigned piece_bits(const uint4& u, int e) {
  constexpr int PER = 4 / (int)sizeof(T);  // elements a word
  const int w = e / PER;
  const unsigned word = w == 0 ? u.x : w == 1 ? u.y : w == 2 ? u.z : u.w;
  return PER == 1 ? word : (word >> (16 * (e % PER))) & 0xffffu;
}

/* Element e's key in a 16-byte piece of T elements (its bits as argmax_key(T) reads them). */
template <typename T> struct ArgmaxBits;
template <> struct ArgmaxBits<float> {
  static constexpr unsigned SIGN = 31, INF = 0x7f800000u;
};
template <> struct ArgmaxBits<__half> {
  static constexpr unsigned SIGN = 15, INF = 0x7c00u;
};
template <> struct ArgmaxBits<__nv_bfloat16> {
  static constexpr unsigned SIGN = 15, INF = 0x7f80u;
};
template <typename T>
__device__ __forceinline__ int argmax_piece_key(const uint4& u, int e) {
  const unsigned b = piece_bits<T>(u, e);
  constexpr unsigned S = ArgmaxBits<T>::SIGN;
  return argmax_key(b >> S, b & ((1u << S) - 1u), ArgmaxBits<T>::INF);
}

constexpr int ARGMAX_U = 4;  // 16-byte loads in flight a thread

/* (key, col) takes (k, c) when that is larger, or as large at a lower column. */
__device__ __forceinline__ void argmax_take(int& key, int& col, int k, int c) {
  if (k > key || (k == key && c < col)) {
    key = k;
    col = c;
  }
}

/* The team's best (key, col), in every thread of the team. */
template <int NT>
__device__ __forceinline__ void argmax_team(int& key, int& col, int* red, int round, int thread) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const int k = __shfl_xor_sync(0xffffffffu, key, o), c = __shfl_xor_sync(0xffffffffu, col, o);
    argmax_take(key, col, k, c);
  }
  if constexpr (NT > 32) {
    const int warp = thread >> 5, lane = thread & 31;
    int* slot = red + (round & 1) * ROW_WARPS * 2;
    if (lane == 0) {
      slot[warp * 2] = key;
      slot[warp * 2 + 1] = col;
    }
    __syncthreads();
    const int first = warp / (NT / 32) * (NT / 32);  // the team's first warp
    key = slot[first * 2];
    col = slot[first * 2 + 1];
#pragma unroll
    for (int w = 1; w < NT / 32; ++w) argmax_take(key, col, slot[(first + w) * 2], slot[(first + w) * 2 + 1]);
  }
}

template <typename T, int NT>
__device__ __noinline__ void argmax_rows(const T* x, int* out, int cols, int r0, int r1, unsigned char* smem) {
  static_assert(NT % 32 == 0 && ROW_THREADS % NT == 0, "a team is whole warps of the CTA");
  constexpr int TEAMS = ROW_THREADS / NT;
  int* red = (int*)smem;
  const int th = threadIdx.x, team = th / NT, tid = th % NT;
  constexpr int P = 16 / (int)sizeof(T);  // elements a piece
  const bool pieces_whole = cols % P == 0 && (reinterpret_cast<unsigned long long>(x) & 15) == 0;
  int round = 0;
  for (int rb = r0; rb < r1; rb += TEAMS, ++round) {  // the same trips for every thread: the team's barriers
    const int r = rb + team;
    const bool live = r < r1;
    int key = ARGMAX_NONE_KEY, col = ARGMAX_NONE_COL;
    if (live && pieces_whole) {
      const uint4* row = reinterpret_cast<const uint4*>(x + (long long)r * cols);
      const int pieces = cols / P;
#pragma unroll 1
      for (int i0 = tid; i0 < pieces; i0 += NT * ARGMAX_U) {
        uint4 raw[ARGMAX_U];  // every load made (past the end: the last piece again, unused), then used in order
#pragma unroll
        for (int u = 0; u < ARGMAX_U; ++u) raw[u] = row[min(i0 + u * NT, pieces - 1)];
#pragma unroll
        for (int u = 0; u < ARGMAX_U; ++u) {
          const int i = i0 + u * NT;
          if (i < pieces) {
#pragma unroll
            for (int e = 0; e < P; ++e) {
              const int k = argmax_piece_key<T>(raw[u], e);
              if (k > key) {  // columns grow: an equal key keeps the earlier one
                key = k;
                col = i * P + e;
              }
            }
          }
        }
      }
    } else if (live) {
      const T* row = x + (long long)r * cols;
#pragma unroll 4
      for (int c = tid; c < cols; c += NT) {
        const int k = argmax_key(row[c]);
        if (k > key) {  // columns grow: an equal key keeps the earlier one
          key = k;
          col = c;
        }
      }
    }
    argmax_team<NT>(key, col, red, round, th);
    if (live && tid == 0) out[r] = col;
  }
}

}  // namespace ark

#endif
