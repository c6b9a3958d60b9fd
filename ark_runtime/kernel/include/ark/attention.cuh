/* Attention tiles, flash-style: the queries [q0, q1) of one (batch, head) against keys [0, kv_end) of that head's
 * key/value head (kv_end = q1 + off when causal, else seq_kv), with a running max and sum per query (online
 * softmax), so the scores are never stored. Query i sees keys up to i + off when causal: off = seq_kv - seq_q puts
 * the queries at the end of the keys (a prefill after a cached prefix, a decode step), 0 when they are the same
 * rows. Grouped-query attention: several query heads read one key/value head (col0_kv), and K and V rows are EKV
 * elements wide where Q's and the output's are E.
 *
 * bf16/fp16 (`attention_tile`): tensor cores (mma.sync m16n8k16, fp32 accumulation). A tile of BQ queries (16, 32
 * or 64; ops/attention.py picks it) has G = BQ / 16 groups of 16 query rows; the CTA's 8 warps are G groups x S = 8 / G
 * key splits: warp w works on group w % G and, of every stage of KB = S x KW keys, on the KW keys of split w / G.
 * Q (BQ x D) and the stages of K and V (KB x D each) are copied into shared memory with cp.async (16-byte pieces
 * where rows are aligned, else element by element), STAGES (2, or 1 where two do not fit) stages in flight; rows
 * are padded by 8 elements, so the ldmatrix loads of 8 consecutive rows fall in distinct banks, and the head
 * dimension is zero-padded to DP, a multiple of 16 (the MMA's k). Per stage a warp computes its 16 x KW scores
 * S = Q K^T (Q's A fragments by ldmatrix, K's B fragments by ldmatrix of K's rows), masks keys past kv_end and,
 * when causal, keys after the query, updates each row's running max m and sum l (in exp2 units: the scale
 * 1/sqrt(D) and log2(e) are folded into one multiply-add before ex2), turns the fp32 score fragments into the
 * A fragments of P (the C layout of two n-tiles is the A layout of one k-step) and accumulates O += P V (V's B
 * fragments by ldmatrix.trans of V's rows). A warp keeps O for DC <= 128 output columns (64 fp32 registers at
 * most): for DP > 128 the tile passes over the keys once per DC columns. At the end of a pass every warp writes
 * its m, l and O to shared memory (over the stages' space), and the CTA merges the S splits of each row
 * (O = sum_s 2^(m_s - M) O_s / sum_s 2^(m_s - M) l_s) and stores the rows, 16 bytes at a time where aligned.
 *
 * The tile is a __noinline__ function: inlined into the loop kernel's switch, its registers (up to 128 a thread)
 * were allocated together with every other op's, and the compiler spilled in the matmul loops.
 *
 * fp32 (`attention_tile_scalar`): scalar fp32 from shared memory, one query row per warp at a time.
 */
#ifndef ARK_ATTENTION_CUH
#define ARK_ATTENTION_CUH

#include "matmul.cuh"  // cp_async16, cp_async_commit, cp_async_wait
#include "numeric.cuh"

namespace ark {

/* ---------------------------------------------------------------------------------------------------------
 * Tensor-core path (bf16, fp16)
 * --------------------------------------------------------------------------------------------------------- */

constexpr int ATT_WARPS = 8;
constexpr int ATT_STAGE_BUDGET = 80 * 1024;  // bytes for the stages of K and V in flight

/* The tile's constants for head dimension D and BQ queries (ops/attention.py's AttentionShape mirrors this). */
template <int D, int BQ>
struct AttnShape {
  static_assert(BQ == 16 || BQ == 32 || BQ == 64, "16, 32 or 64 queries a tile");
  static constexpr int DP = (D + 15) / 16 * 16;  // head dimension padded to the MMA's k
  static constexpr int LD = DP + 8;              // shared-memory row stride, elements
  static constexpr int G = BQ / 16;              // groups of 16 query rows
  static constexpr int S = ATT_WARPS / G;        // key splits
  static constexpr int KW = 2 * 2 * 32 * S * LD * 2 <= ATT_STAGE_BUDGET ? 32 : 16;  // keys per warp per stage
  static constexpr int KB = KW * S;                                                  // keys per stage
  static constexpr int STAGE = 2 * KB * LD * 2;                                      // bytes: K and V
  static constexpr int STAGES = 2 * STAGE <= ATT_STAGE_BUDGET ? 2 : 1;
  static constexpr int DC = DP <= 128 ? DP : 128;  // output columns per pass over the keys
  static constexpr int PASSES = (DP + DC - 1) / DC;
  static constexpr int DCP = DC + 8;  // merge scratch row stride, floats (the float2 stores of a quad row apart)
  static constexpr int Q_BYTES = BQ * LD * 2;
  static constexpr int MERGE = ATT_WARPS * 16 * (DCP + 2) * 4;  // O, then m and l, of every warp
  static constexpr int KV_BYTES = STAGES * STAGE > MERGE ? STAGES * STAGE : MERGE;
  static constexpr int SMEM = Q_BYTES + KV_BYTES;
  static constexpr bool QREG = DP * KW <= 64 * 16;  // Q's A fragments kept in registers (else ldmatrix per stage)
  static_assert(!QREG || PASSES == 1, "");
};

template <typename T, int D, int BQ>
__host__ __device__ constexpr int attention_smem() {
  return AttnShape<D, BQ>::SMEM;
}

namespace attn {

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }


__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

__device__ __forceinline__ void ldsm_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

/* c += a b for one m16n8k16 step: a the A fragment (16 x 16, row), b0 b1 the B fragment (16 x 8, col). */
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
template <>
__device__ __forceinline__ void mma<__nv_bfloat16>(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma<__half>(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats as one register of two 16-bit elements, `lo` in the low half (the lower column). */
template <typename T> __device__ __forceinline__ unsigned pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack2<__nv_bfloat16>(float lo, float hi) {
  return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
         ((unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}
template <> __device__ __forceinline__ unsigned pack2<__half>(float lo, float hi) {
  return (unsigned)__half_as_ushort(__float2half_rn(lo)) | ((unsigned)__half_as_ushort(__float2half_rn(hi)) << 16);
}

__device__ __forceinline__ float ex2(float x) {  // 2^x; 2^-inf = +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* Rows [r_lo, r_lo + ROWS) of one head (columns col0 .. col0 + D - 1 of a [*, E] tensor, row `base` first)
 * into shared memory rows of LD elements, DP of them written: rows at or past r_end and columns past D are
 * zero. VEC: 16-byte cp.async (E, col0 and D multiples of 8); else element by element, plain stores. E is a
 * constant, so a thread's pieces are one address plus immediate offsets (else the compiler keeps an address per
 * piece live through the loop over stages). */
template <typename T, int E, int ROWS, int D, int DP, int LD, bool VEC>
__device__ __forceinline__ void load_rows(T* dst, const T* src, int base, int r_lo, int r_end, int col0, int tid) {
  if constexpr (VEC) {
    constexpr int PR = DP / 8, N = ROWS * PR;  // 16-byte pieces per row, in all
#pragma unroll
    for (int j = 0; j < (N + ATT_WARPS * 32 - 1) / (ATT_WARPS * 32); ++j) {
      const int i = tid + j * ATT_WARPS * 32;
      if (N % (ATT_WARPS * 32) != 0 && i >= N) break;
      const int r = i / PR, c = i % PR * 8;
      const bool in = r_lo + r < r_end && c < D;
      cp_async16(dst + r * LD + c, in ? src + ((long long)(base + r_lo + r) * E + col0 + c) : src, in);
    }
  } else {
    for (int i = tid; i < ROWS * DP; i += ATT_WARPS * 32) {
      const int r = i / DP, c = i % DP;
      const bool in = r_lo + r < r_end && c < D;
      dst[r * LD + c] = in ? src[(long long)(base + r_lo + r) * E + col0 + c] : from_float<T>(0.0f);
    }
  }
}

}  // namespace attn

template <typename T, int D, int BQ, bool CAUSAL, bool VEC, int E, int EKV>
__device__ __noinline__ void attention_tile(const T* q, const T* k, const T* v, T* out, int seq_kv, int base,
                                           int base_kv, int q0, int q1, int col0, int col0_kv, int off,
                                           unsigned char* smem) {
  using A = AttnShape<D, BQ>;
  constexpr int DP = A::DP, LD = A::LD, G = A::G, KW = A::KW, KB = A::KB, DC = A::DC, STAGES = A::STAGES;
  constexpr int NT = KW / 8;  // score n-tiles (8 keys each) per warp per stage
  static_assert(!VEC || (D % 8 == 0 && EKV % 8 == 0), "16-byte pieces of a head's rows");
  T* sq = (T*)smem;
  T* skv = (T*)(smem + A::Q_BYTES);                          // stage b: K at skv + b * 2 * KB * LD, V after it
  float* so = (float*)(smem + A::Q_BYTES);                   // after a pass: O of warp w, row r at (w * 16 + r) * DCP
  float* sm = so + ATT_WARPS * 16 * A::DCP;                  // m of warp w, row r at w * 16 + r (exp2 units)
  float* sl = sm + ATT_WARPS * 16;                           // l likewise
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int grp = warp % G, split = warp / G;
  const int g = lane >> 2, t = lane & 3;  // the fragments' groupID and thread-in-group
  const int kv_end = CAUSAL ? min(q1 + off, seq_kv) : seq_kv;
  const int stages = (kv_end + KB - 1) / KB;
  const int qf = q0 + grp * 16;  // this warp's first query (relative to the head's first row)
  const int ql = min(qf + 15, q1 - 1);  // and its last real one (below qf when the group is past q1)
  const float sl2 = rsqrtf((float)D) * 1.4426950408889634f;  // scores to exp2 units

  auto load_stage = [&](int s, int b) {
    T* dk = skv + b * 2 * KB * LD;
    attn::load_rows<T, EKV, KB, D, DP, LD, VEC>(dk, k, base_kv, s * KB, kv_end, col0_kv, tid);
    attn::load_rows<T, EKV, KB, D, DP, LD, VEC>(dk + KB * LD, v, base_kv, s * KB, kv_end, col0_kv, tid);
  };

  attn::load_rows<T, E, BQ, D, DP, LD, VEC>(sq, q, base, q0, q1, col0, tid);
  cp_async_commit();
  unsigned qa[A::QREG ? DP / 16 : 1][4];  // Q's A fragments, where kept

#pragma unroll 1
  for (int pass = 0; pass < A::PASSES; ++pass) {
    const int dc0 = pass * DC;
    load_stage(0, 0);
    cp_async_commit();
    if constexpr (STAGES == 2) {
      if (stages > 1) load_stage(1, 1);
      cp_async_commit();
    }
    if constexpr (A::QREG) {  // (one pass) Q's fragments once, while the first stages load
      cp_async_wait<STAGES>();
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < DP / 16; ++kk)
        attn::ldsm_x4(qa[kk], sq + (grp * 16 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
    }
    float o[DC / 8][4];
#pragma unroll
    for (int j = 0; j < DC / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {-ARK_INF, -ARK_INF}, l[2] = {0.0f, 0.0f};  // rows g and g + 8: max (raw scores), partial sum

#pragma unroll 1
    for (int s = 0; s < stages; ++s) {
      if constexpr (STAGES == 2) cp_async_wait<1>();
      else cp_async_wait<0>();
      __syncthreads();  // stage s (and Q) are in shared memory
      const T* sk = skv + (s % STAGES) * 2 * KB * LD;
      const T* sv = sk + KB * LD;
      const int key0 = s * KB + split * KW;  // this warp's first key of the stage
      if (key0 < kv_end && (!CAUSAL || key0 <= ql + off) && qf < q1) {
        // S = Q K^T: NT n-tiles of 8 keys, c[j] = rows g, g (cols 2t, 2t+1), then g + 8, g + 8
        float sc[NT][4];
#pragma unroll
        for (int j = 0; j < NT; ++j) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
        const T* kw = sk + (split * KW) * LD;
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
          unsigned a[4];
          if constexpr (A::QREG) {
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = qa[kk][i];
          } else {
            attn::ldsm_x4(a, sq + (grp * 16 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
          }
#pragma unroll
          for (int j = 0; j < NT; j += 2) {  // keys 8j .. 8j + 15: B fragments of n-tiles j and j + 1
            unsigned b[4];
            attn::ldsm_x4(b, kw + (j * 8 + (lane & 7) + (lane >> 4) * 8) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
            attn::mma<T>(sc[j], a, b[0], b[1]);
            attn::mma<T>(sc[j + 1], a, b[2], b[3]);
          }
        }
        // masks: keys at or past kv_end; when causal, keys after the row's query (shifted by off)
        if (key0 + KW > kv_end || (CAUSAL && key0 + KW - 1 > qf + off)) {
#pragma unroll
          for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = key0 + j * 8 + 2 * t + (e & 1), row = qf + g + (e >> 1) * 8;
              if (key >= kv_end || (CAUSAL && key > row + off)) sc[j][e] = -ARK_INF;
            }
        }
        // online softmax, per row (the quad of lanes 4g .. 4g + 3 holds a row's KW scores)
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          mx[0] = fmaxf(mx[0], fmaxf(sc[j][0], sc[j][1]));
          mx[1] = fmaxf(mx[1], fmaxf(sc[j][2], sc[j][3]));
        }
        float mb[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
          mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
          const float corr = mx[h] == -ARK_INF ? 1.0f : attn::ex2((m[h] - mx[h]) * sl2);  // m = -inf: 0
          mb[h] = mx[h] == -ARK_INF ? 0.0f : mx[h] * sl2;
          m[h] = mx[h];
          l[h] *= corr;
#pragma unroll
          for (int j = 0; j < DC / 8; ++j) {
            o[j][2 * h] *= corr;
            o[j][2 * h + 1] *= corr;
          }
        }
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            sc[j][e] = attn::ex2(fmaf(sc[j][e], sl2, -mb[e >> 1]));  // masked: 2^-inf = 0
            l[e >> 1] += sc[j][e];
          }
        // O += P V: k-steps of 16 keys (the C fragments of n-tiles 2kk, 2kk + 1 are P's A fragment)
        const T* vw = sv + (split * KW) * LD;
#pragma unroll
        for (int kk = 0; kk < KW / 16; ++kk) {
          const unsigned pa[4] = {attn::pack2<T>(sc[2 * kk][0], sc[2 * kk][1]),
                                  attn::pack2<T>(sc[2 * kk][2], sc[2 * kk][3]),
                                  attn::pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                                  attn::pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
          for (int j = 0; j < DC / 8; j += 2) {  // output columns dc0 + 8j .. + 15: n-tiles j and j + 1
            if (A::PASSES > 1 && dc0 + j * 8 >= DP) continue;
            unsigned b[4];
            attn::ldsm_x4_trans(b, vw + (kk * 16 + (lane & 15)) * LD + dc0 + j * 8 + (lane >> 4) * 8);
            attn::mma<T>(o[j], pa, b[0], b[1]);
            attn::mma<T>(o[j + 1], pa, b[2], b[3]);
          }
        }
      }
      __syncthreads();  // every warp is done with buffer s % STAGES
      if (s + STAGES < stages) load_stage(s + STAGES, s % STAGES);
      cp_async_commit();
    }
    cp_async_wait<0>();

    // merge the S splits of each row: every warp's m, l and O into shared memory (over the stages)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    if (t == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        sm[warp * 16 + g + 8 * h] = m[h] == -ARK_INF ? -ARK_INF : m[h] * sl2;
        sl[warp * 16 + g + 8 * h] = l[h];
      }
    }
#pragma unroll
    for (int j = 0; j < DC / 8; ++j) {
      float* row = so + (warp * 16 + g) * A::DCP + j * 8 + 2 * t;
      *(float2*)row = make_float2(o[j][0], o[j][1]);
      *(float2*)(row + 8 * A::DCP) = make_float2(o[j][2], o[j][3]);
    }
    __syncthreads();
    constexpr int C8 = DC / 8;  // 8-column pieces of a row
    for (int i = tid; i < BQ * C8; i += ATT_WARPS * 32) {
      const int r = i / C8, c = dc0 + i % C8 * 8;
      if (q0 + r >= q1 || c >= D) continue;
      const int rg = r >> 4, rr = r & 15;
      float mm = -ARK_INF;
#pragma unroll
      for (int sp = 0; sp < A::S; ++sp) mm = fmaxf(mm, sm[(rg + sp * G) * 16 + rr]);
      float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, den = 0.0f;
#pragma unroll
      for (int sp = 0; sp < A::S; ++sp) {
        const int w = (rg + sp * G) * 16 + rr;
        const float f = sm[w] == -ARK_INF ? 0.0f : attn::ex2(sm[w] - mm);
        den += f * sl[w];
        const float4 x0 = *(const float4*)(so + w * A::DCP + c - dc0);
        const float4 x1 = *(const float4*)(so + w * A::DCP + c - dc0 + 4);
        acc[0] += f * x0.x, acc[1] += f * x0.y, acc[2] += f * x0.z, acc[3] += f * x0.w;
        acc[4] += f * x1.x, acc[5] += f * x1.y, acc[6] += f * x1.z, acc[7] += f * x1.w;
      }
      const float inv = __fdividef(1.0f, den);
      const long long at = (long long)(base + q0 + r) * E + col0 + c;
      if constexpr (VEC) {
        uint4 u;
        u.x = attn::pack2<T>(acc[0] * inv, acc[1] * inv);
        u.y = attn::pack2<T>(acc[2] * inv, acc[3] * inv);
        u.z = attn::pack2<T>(acc[4] * inv, acc[5] * inv);
        u.w = attn::pack2<T>(acc[6] * inv, acc[7] * inv);
        *(uint4*)(out + at) = u;
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (c + e < D) st(out, at + e, acc[e] * inv);
      }
    }
    if (A::PASSES > 1) __syncthreads();  // the merge's reads are done before the next pass's stages land there
  }
}

/* ---------------------------------------------------------------------------------------------------------
 * Scalar path (fp32): keys and values through shared memory KB rows at a time (as float, rows padded by one
 * word against bank conflicts); each warp owns query rows, each lane one key of the block for the scores and
 * D/32 output columns for the sum.
 * --------------------------------------------------------------------------------------------------------- */

constexpr int KB = 32;

template <int D>
__host__ __device__ constexpr int attention_scalar_smem() {
  return (2 * KB * (D + 1) + 8 * D) * 4;
}

template <typename T, int D, bool CAUSAL>
__device__ void attention_tile_scalar(const T* q, const T* k, const T* v, T* out, int seq_kv, int cols, int cols_kv,
                                      int base, int base_kv, int q0, int q1, int col0, int col0_kv, int off,
                                      unsigned char* smem) {
  constexpr int P = (D + 31) / 32;  // output columns per lane
  float* sk = (float*)smem;
  float* sv = sk + KB * (D + 1);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  float* sq = sv + KB * (D + 1) + warp * D;
  const float scale = rsqrtf((float)D);
  const int kv_end = CAUSAL ? min(q1 + off, seq_kv) : seq_kv;
  const int rows_per_warp = (q1 - q0 + warps - 1) / warps;
  float m[4], l[4], acc[4][P];  // up to four query rows per warp at a time
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
        const long long g = (long long)(base_kv + kb + r) * cols_kv + col0_kv + c;
        sk[r * (D + 1) + c] = in ? ld(k, g) : 0.0f;
        sv[r * (D + 1) + c] = in ? ld(v, g) : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int qi = q0 + warp + (pass + j) * warps;  // this warp's row
        if (pass + j >= rows_per_warp || qi >= q1) continue;
        if (CAUSAL && kb > qi + off) continue;
        for (int c = lane; c < D; c += 32) sq[c] = ld(q, (long long)(base + qi) * cols + col0 + c) * scale;
        __syncwarp();
        const int key = kb + lane;
        float s = -ARK_INF;
        if (key < kv_end && (!CAUSAL || key <= qi + off)) {
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
