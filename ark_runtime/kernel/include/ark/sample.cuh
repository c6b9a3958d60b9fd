/* The sample op (ops/sample.py): for each row of logits x, one column drawn from softmax(x / temperature) cut to its
 * top_k largest elements (0: all), then to the smallest set of those, largest first, whose probability reaches
 * top_p of theirs (ties between equal elements go to the lower column), renormalized. The whole CTA works on one
 * row at a time, without sorting it:
 *
 *   1. the row's argmax (argmax.cuh's keys and team): a row whose largest element is not finite (NaN, +inf, or every
 *      element -inf) gives it, as top_k = 1 does; m, the largest value, scales the rest: p(x) = 2^((x - m) s) with
 *      s = log2(e) / temperature (1 at m, 0 at -inf);
 *   2. top_k: the k-th largest element's key by a radix select over the keys' 4-bit digits, most significant first
 *      (a pass over the row for each digit: 4 for 16-bit dtypes, 8 for fp32), counting per digit; when fewer of the
 *      elements at that key are kept than the row has, the column of the last kept one by an ordered count. Up to
 *      SAMPLE_LIST kept elements then go to shared memory, sorted by column, and the rest reads them from there;
 *   3. top_p: the same radix select over the kept elements weighting each by p, the target top_p of their total;
 *      at the threshold key, ceil(what is left / p there) elements, the lowest columns, by an ordered count;
 *   4. the draw: the first column, in column order, whose cumulative p over the kept set exceeds u times the set's
 *      total, u = philox.cuh's sample_uniform(seed, step, row).
 *
 * Rows are read in 16-byte pieces where each row starts on 16 bytes (VEC: cols a multiple of 16 bytes' elements),
 * else element by element, several loads in flight per thread. Ordered counts and sums (sample_find) give each warp
 * a contiguous run of lines (32 pieces, a piece a lane); a lane adds its piece in order, a line is a butterfly of
 * shuffles (the same in every lane), a warp adds its lines in order, the CTA its warps in order, and the warp where
 * the target falls walks its lines again and scans the line, then the lane its piece. Masses are summed in float
 * within a piece and in double from there on, and no sum uses atomics: a row's draw is the same on every run, and
 * the sums are within a few float roundings of the exact ones. The radix passes keep 16 per-digit float sums per
 * thread, reduced across the CTA in double in a fixed order too. p's exponent is carried to about double precision
 * (the roundings of x - m, of (x - m) s and of s itself are added back), so p is as accurate as the SFU's 2^x
 * (2 ulp). Where rounding leaves a sum short of its target, the set keeps everything below (top_p) or the draw takes
 * the last kept column.
 *
 * The float64 reference (ops/sample.py) computes the same sets and the same column-order cumulative sum; it agrees
 * with this kernel except where u times the total, or top_p times the kept mass, falls within float rounding of a
 * boundary between cumulative sums. */
#ifndef ARK_SAMPLE_CUH
#define ARK_SAMPLE_CUH

#include "argmax.cuh"
#include "philox.cuh"

namespace ark {

constexpr int SAMPLE_DIGITS = 16;  // buckets of a radix pass: 4 bits of the key
constexpr int SAMPLE_ALL = 0x7fffffff;  // a cut column that keeps every element at its key
constexpr int SAMPLE_LIST = 1024;  // top_k up to this: the kept elements are read from shared memory
constexpr int SAMPLE_ARGMAX_BYTES = 2 * ROW_WARPS * 2 * 4;  // argmax_team's slots
constexpr int SAMPLE_RED_BYTES = (ROW_WARPS + 1) * SAMPLE_DIGITS * 8;  // a warp's 16 sums (double), or its one
                                                                    // total; the CTA's 16
constexpr int SAMPLE_SLOT_AT = SAMPLE_ARGMAX_BYTES + SAMPLE_RED_BYTES;  // the found column, the list's count
constexpr int SAMPLE_LIST_AT = SAMPLE_SLOT_AT + 16;  // the list: SAMPLE_LIST columns, then their bits
constexpr int SAMPLE_SMEM = SAMPLE_LIST_AT + SAMPLE_LIST * 8;
constexpr float SAMPLE_LN2 = 0.6931471805599453f;

template <typename T> struct SampleDtype;
template <> struct SampleDtype<float> {
  static constexpr int KB = 32;  // bits of an element and of its key
  static constexpr unsigned INF = 0x7f800000u;
  static __device__ __forceinline__ float value(unsigned b) { return __uint_as_float(b); }
  static __device__ __forceinline__ unsigned bits(float v) { return __float_as_uint(v); }
};
template <> struct SampleDtype<__half> {
  static constexpr int KB = 16;
  static constexpr unsigned INF = 0x7c00u;
  static __device__ __forceinline__ float value(unsigned b) { return __half2float(__ushort_as_half((unsigned short)b)); }
  static __device__ __forceinline__ unsigned bits(__half v) { return __half_as_ushort(v); }
};
template <> struct SampleDtype<__nv_bfloat16> {
  static constexpr int KB = 16;
  static constexpr unsigned INF = 0x7f80u;
  static __device__ __forceinline__ float value(unsigned b) { return __uint_as_float(b << 16); }
  static __device__ __forceinline__ unsigned bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
};

/* An element's bits -> an unsigned key in the low KB bits that orders the non-NaN values of T as their values, -0
 * with +0 (argmax_key shifted up by half the range). */
template <typename T>
__device__ __forceinline__ unsigned sample_ukey(unsigned b) {
  constexpr unsigned HALF = 1u << (SampleDtype<T>::KB - 1);
  const unsigned mag = b & (HALF - 1u);
  return (b & HALF) ? HALF - mag : HALF + mag;
}
/* The value whose key is `uk` (+0 for the zeros'). */
template <typename T>
__device__ __forceinline__ float sample_value(unsigned uk) {
  constexpr unsigned HALF = 1u << (SampleDtype<T>::KB - 1);
  return SampleDtype<T>::value(uk >= HALF ? uk - HALF : HALF | (HALF - uk));
}

template <bool VEC, typename T> struct SampleRaw {
  using type = uint4;
};
template <typename T> struct SampleRaw<false, T> {
  using type = T;
};

/* Where a pass reads elements from: a row of x in global memory, in pieces of P elements (16 bytes where rows start
 * on 16 bytes, VEC, else one), each thread loading U pieces before it uses them (loads in flight: one CTA reads the
 * whole row, several times); or a row's kept elements in shared memory (SampleList). Piece i's element e is column
 * column(i, e), its bits bits(load(i), e). */
template <typename T, bool VEC>
struct SampleRow {
  static constexpr int P = VEC ? 16 / (int)sizeof(T) : 1;
  static constexpr int U = VEC ? 4 : 8;
  using Raw = typename SampleRaw<VEC, T>::type;
  const T* row;
  int pieces;
  __device__ __forceinline__ Raw load(int i) const { return reinterpret_cast<const Raw*>(row)[i]; }
  __device__ __forceinline__ unsigned bits(const Raw& r, int e) const {
    if constexpr (VEC) {
      return piece_bits<T>(r, e);
    } else {
      return SampleDtype<T>::bits(r);
    }
  }
  __device__ __forceinline__ int column(int i, int e) const { return i * P + e; }
};

/* A row's kept elements in shared memory, in column order: entry i is column cols[i], holding bits_at[i]. */
struct SampleList {
  static constexpr int P = 1, U = 4;
  using Raw = unsigned;
  const int* cols;
  const unsigned* bits_at;
  int pieces;
  __device__ __forceinline__ Raw load(int i) const { return bits_at[i]; }
  __device__ __forceinline__ unsigned bits(const Raw& r, int) const { return r; }
  __device__ __forceinline__ int column(int i, int) const { return cols[i]; }
};

/* f(i, raw) for each piece of this thread's share (pieces tid, tid + 256, ...), U loads at a time, in order. Every
 * load is made (a piece past the end loads the last one again, unused): an array assigned on some paths only would
 * go to local memory. */
template <typename Src, typename F>
__device__ __forceinline__ void sample_each(const Src& src, F&& f) {
#pragma unroll 1
  for (int i0 = threadIdx.x; i0 < src.pieces; i0 += ROW_THREADS * Src::U) {
    typename Src::Raw raw[Src::U];
#pragma unroll
    for (int u = 0; u < Src::U; ++u) raw[u] = src.load(min(i0 + u * ROW_THREADS, src.pieces - 1));
#pragma unroll
    for (int u = 0; u < Src::U; ++u)
      if (i0 + u * ROW_THREADS < src.pieces) f(i0 + u * ROW_THREADS, raw[u]);
  }
}

/* p(x) = 2^((x - m) s), 1 at the largest value m and 0 at -inf. The exponent's roundings (of x - m, of the product,
 * and s_lo, what rounding s to float left out) go back in to first order; s may be inf (temperatures near 0). */
struct SampleProb {
  float m, s, s_lo;
  __device__ __forceinline__ float operator()(float x) const {
    if (x == -ARK_INF) return 0.0f;
    const float d = x - m;
    if (d == 0.0f) return 1.0f;
    const float back = d - x;  // two-difference: d + d_lo == x - m exactly
    const float d_lo = (x - (d - back)) - (m + back);
    const float e = d * s;
    const float e_lo = fmaf(d, s, -e) + fmaf(d, s_lo, d_lo * s);
    const float y = rows::ex2(e);
    return e_lo == e_lo && fabsf(e_lo) < 1.0f ? fmaf(y, e_lo * SAMPLE_LN2, y) : y;  // (inf s: e_lo is NaN)
  }
};

template <typename A>
__device__ __forceinline__ A sample_warp_sum(A v) {  // a butterfly: every lane adds the same pairs, so ends equal
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* The CTA's sum of each of the 16 per-thread h[k] into tot[k] (shared memory): lanes by the butterfly (in A), then
 * warps in order. */
template <typename W, typename A>
__device__ __forceinline__ void sample_digit_sums(const W (&h)[SAMPLE_DIGITS], A* red, A* tot) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // every thread has read what the slots held before
#pragma unroll
  for (int k = 0; k < SAMPLE_DIGITS; ++k) {
    const A v = sample_warp_sum(A(h[k]));
    if (lane == 0) red[warp * SAMPLE_DIGITS + k] = v;
  }
  __syncthreads();
  if (threadIdx.x < SAMPLE_DIGITS) {
    A v = red[threadIdx.x];
#pragma unroll
    for (int w = 1; w < ROW_WARPS; ++w) v += red[w * SAMPLE_DIGITS + threadIdx.x];
    tot[threadIdx.x] = v;
  }
  __syncthreads();
}

/* The key t at which the weights wt(bits) (W: int or float; summed across the CTA as A: int or double) of the
 * elements that in(column, key) admits, cumulated from the largest key down, first reach goal(their total):
 * `above` gets the weight of the keys above t, `at` that of t itself, `target` the goal. */
template <typename T, typename W, typename A, typename Src, typename In, typename Wt, typename Goal>
__device__ __forceinline__ unsigned sample_select(const Src& src, In in, Wt wt, Goal goal, A& above, A& at,
                                                  A& target, A* red) {
  constexpr int KB = SampleDtype<T>::KB;
  unsigned prefix = 0u;
  above = A(0);
#pragma unroll 1
  for (int shift = KB - 4; shift >= 0; shift -= 4) {
    const unsigned high = shift + 4 >= KB ? 0u : ~0u << (shift + 4);  // the digits chosen so far
    W h[SAMPLE_DIGITS];
#pragma unroll
    for (int k = 0; k < SAMPLE_DIGITS; ++k) h[k] = W(0);
    sample_each(src, [&](int i, const typename Src::Raw& raw) {
#pragma unroll
      for (int e = 0; e < Src::P; ++e) {
        const unsigned b = src.bits(raw, e);
        const unsigned uk = sample_ukey<T>(b);
        if ((uk & high) != prefix || !in(src.column(i, e), uk)) continue;
        const W w = wt(b);
        const unsigned d = (uk >> shift) & (SAMPLE_DIGITS - 1);
#pragma unroll
        for (int k = 0; k < SAMPLE_DIGITS; ++k) h[k] += d == (unsigned)k ? w : W(0);
      }
    });
    A* s = red + ROW_WARPS * SAMPLE_DIGITS;  // the 16 totals
    sample_digit_sums<W, A>(h, red, s);
    if (shift == KB - 4) {
      A total = A(0);
#pragma unroll 1
      for (int k = SAMPLE_DIGITS - 1; k >= 0; --k) total += s[k];
      target = goal(total);
    }
    int pick = -1, low = -1;  // low: the lowest digit with weight, for a target rounding left out of reach
    A cum = above, before_low = above, picked = A(0), low_w = A(0);
#pragma unroll 1
    for (int k = SAMPLE_DIGITS - 1; k >= 0 && pick < 0; --k) {
      const A sk = s[k];
      if (!(sk > A(0))) continue;
      if (cum + sk >= target) {
        pick = k;
        picked = sk;
      } else {
        low = k;
        low_w = sk;
        before_low = cum;
        cum += sk;
      }
    }
    if (pick < 0) {  // everything left is kept: the lowest digit with weight ends it
      pick = low < 0 ? 0 : low;
      picked = low_w;
      cum = before_low;
    }
    above = cum;
    at = picked;
    prefix |= (unsigned)pick << shift;
  }
  return prefix;
}

/* The first column, in column order, at which the weights wt(column, bits) (W) cumulated from the first (as A)
 * exceed goal(their total); SAMPLE_ALL where the goal is not below the total. Rounding that leaves the target out
 * of reach gives the last column with weight. */
template <typename W, typename A, typename Src, typename Wt, typename Goal>
__device__ __forceinline__ int sample_find(const Src& src, Wt wt, Goal goal, A* red, int* slot) {
  constexpr int P = Src::P, U = Src::U;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int lines = (src.pieces + 31) >> 5, per = (lines + ROW_WARPS - 1) / ROW_WARPS;
  const int l0 = min(warp * per, lines), l1 = min(l0 + per, lines);  // this warp's lines
  // this lane's piece of line l: its weights and their sum, in order
  const auto weights = [&](int l, const typename Src::Raw& raw, W (&w)[P]) -> W {
    const int i = l * 32 + lane;
    W sum = W(0);
#pragma unroll
    for (int e = 0; e < P; ++e) {
      w[e] = i < src.pieces ? wt(src.column(i, e), src.bits(raw, e)) : W(0);
      sum += w[e];
    }
    return sum;
  };
  const auto load = [&](int l) { return src.load(min(l * 32 + lane, src.pieces - 1)); };
  A mine = A(0);
#pragma unroll 1
  for (int l = l0; l < l1; l += U) {
    typename Src::Raw raw[U];
#pragma unroll
    for (int u = 0; u < U; ++u) raw[u] = load(min(l + u, l1 - 1));
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (l + u >= l1) break;  // the same in every lane
      W w[P];
      mine += sample_warp_sum(A(weights(l + u, raw[u], w)));
    }
  }
  __syncthreads();  // every thread has read what the slots held before
  if (lane == 0) red[warp] = mine;
  __syncthreads();
  const A* each = red;  // the warps' totals
  A total = A(0);
#pragma unroll 1
  for (int k = 0; k < ROW_WARPS; ++k) total += each[k];
  const A target = goal(total);
  if (!(target < total)) return SAMPLE_ALL;  // the same answer in every thread
  int pick = -1, last = -1;
  A cum = A(0), before = A(0), before_last = A(0);
#pragma unroll 1
  for (int k = 0; k < ROW_WARPS; ++k) {
    if (pick < 0 && each[k] > A(0)) {
      if (cum + each[k] > target) {
        pick = k;
        before = cum;
      } else {
        last = k;
        before_last = cum;
      }
    }
    cum += each[k];
  }
  const bool short_of = pick < 0;  // rounding: the target is past every warp
  if (short_of) {
    pick = last;
    before = before_last;
  }
  if (warp == pick) {
    A a = before;
    int found = -1, last_line = l0;
#pragma unroll 1
    for (int l = l0; l < l1 && found < 0; ++l) {
      W w[P];
      const W mine_w = weights(l, load(l), w);
      const A v = A(mine_w);
      const A line = sample_warp_sum(v);
      if (!(line > A(0))) continue;
      last_line = l;
      if (!short_of && a + line > target) {
        A incl = v;  // the line's inclusive scan over lanes
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const A n = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += n;
        }
        const unsigned hit = __ballot_sync(0xffffffffu, mine_w > W(0) && a + incl > target);
        const unsigned some = __ballot_sync(0xffffffffu, mine_w > W(0));
        const int at_lane = hit ? __ffs(hit) - 1 : 31 - __clz(some);  // rounding: the line's last lane with weight
        int e_hit = -1, e_last = 0;
        A acc = a + incl - v;  // before this lane's piece
#pragma unroll
        for (int e = 0; e < P; ++e) {
          if (!(w[e] > W(0))) continue;
          e_last = e;
          acc += A(w[e]);
          if (e_hit < 0 && acc > target) e_hit = e;
        }
        const int mine_col = src.column(min(l * 32 + lane, src.pieces - 1), e_hit < 0 ? e_last : e_hit);
        found = __shfl_sync(0xffffffffu, mine_col, at_lane);
      }
      a += line;
    }
    if (found < 0) {  // rounding: the last column with weight of the warp's last line with weight
      W w[P];
      const W mine_w = weights(last_line, load(last_line), w);
      const int at_lane = 31 - __clz(__ballot_sync(0xffffffffu, mine_w > W(0)));
      int e_last = 0;
#pragma unroll
      for (int e = 0; e < P; ++e)
        if (w[e] > W(0)) e_last = e;
      found = __shfl_sync(0xffffffffu, src.column(min(last_line * 32 + lane, src.pieces - 1), e_last), at_lane);
    }
    if (lane == 0) *slot = found;
  }
  __syncthreads();
  return *slot;
}

/* Steps 3 and 4 over `src`, whose elements kept_k(column, key) keeps after top_k: the column drawn. */
template <typename T, typename Src, typename Kept>
__device__ __forceinline__ int sample_kept(const Src& src, Kept kept_k, const SampleProb& p, float top_p, double u,
                                           unsigned char* smem) {
  double* dred = (double*)(smem + SAMPLE_ARGMAX_BYTES);
  int* ired = (int*)(smem + SAMPLE_ARGMAX_BYTES);
  int* slot = (int*)(smem + SAMPLE_SLOT_AT);
  unsigned tp = 0u;  // top_p: keys above tp, and at tp the columns up to cp
  int cp = SAMPLE_ALL;
  if (top_p < 1.0f) {
    double above = 0.0, at = 0.0, target = 0.0;
    tp = sample_select<T, float, double>(src, kept_k, [=](unsigned b) { return p(SampleDtype<T>::value(b)); },
                                         [=](double total) { return (double)top_p * total; }, above, at, target,
                                         dred);
    const double need = ceil((target - above) / (double)p(sample_value<T>(tp)));
    const int n = need < 2.0e9 ? max(1, (int)need) : SAMPLE_ALL;  // NaN too: keep all there
    if (n < SAMPLE_ALL)
      cp = sample_find<int, int>(src, [=](int c, unsigned b) {
        const unsigned uk = sample_ukey<T>(b);
        return uk == tp && kept_k(c, uk) ? 1 : 0;
      }, [=](int) { return n - 1; }, ired, slot);
  }
  return sample_find<float, double>(src, [=](int c, unsigned b) {
    const unsigned uk = sample_ukey<T>(b);
    return kept_k(c, uk) && (uk > tp || (uk == tp && c <= cp)) ? p(SampleDtype<T>::value(b)) : 0.0f;
  }, [=](double total) { return u * total; }, dred, slot);
}

/* The `n` elements of `src` that kept(column, key) keeps into the shared-memory list, sorted by column (a bitonic
 * sort of the next power of two, padded with SAMPLE_ALL). */
template <typename T, typename Src, typename Kept>
__device__ __forceinline__ SampleList sample_list(const Src& src, Kept kept, int n, unsigned char* smem) {
  int* count = (int*)(smem + SAMPLE_SLOT_AT) + 1;
  int* cols = (int*)(smem + SAMPLE_LIST_AT);
  unsigned* bits = (unsigned*)(cols + SAMPLE_LIST);
  __syncthreads();  // every thread is past the last read of the list and the count
  if (threadIdx.x == 0) *count = 0;
  __syncthreads();
  sample_each(src, [&](int i, const typename Src::Raw& raw) {
#pragma unroll
    for (int e = 0; e < Src::P; ++e) {
      const unsigned b = src.bits(raw, e);
      const int c = src.column(i, e);
      if (!kept(c, sample_ukey<T>(b))) continue;
      const int at = atomicAdd(count, 1);  // any order: the sort below puts them in column order
      if (at < SAMPLE_LIST) {
        cols[at] = c;
        bits[at] = b;
      }
    }
  });
  int size = 1;
  while (size < n) size <<= 1;
  for (int i = n + threadIdx.x; i < size; i += ROW_THREADS) cols[i] = SAMPLE_ALL;
  __syncthreads();
#pragma unroll 1
  for (int k = 2; k <= size; k <<= 1) {
#pragma unroll 1
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int t = threadIdx.x; t < size / 2; t += ROW_THREADS) {
        const int lo = 2 * t - (t & (j - 1)), hi = lo + j;  // a pair j apart, lo's bit j clear
        const int a = cols[lo], b = cols[hi];
        if ((a > b) == ((lo & k) == 0)) {
          cols[lo] = b;
          cols[hi] = a;
          const unsigned x = bits[lo];
          bits[lo] = bits[hi];
          bits[hi] = x;
        }
      }
      __syncthreads();
    }
  }
  return SampleList{cols, bits, n};
}

/* The op's constants, as template arguments (floats as their bits): the call passes only what varies, as the other
 * row-wise templates do, which keeps the loop kernel's registers at its calls. s + s_lo = log2(e) / temperature;
 * TOP_K 0 keeps all; top_p 1 keeps all. */
template <int TOP_K, unsigned S_BITS, unsigned S_LO_BITS, unsigned TOP_P_BITS, unsigned long long SEED>
struct SampleArgs {
  static constexpr int top_k = TOP_K;
  static constexpr unsigned long long seed = SEED;
  static __device__ __forceinline__ float s() { return __uint_as_float(S_BITS); }
  static __device__ __forceinline__ float s_lo() { return __uint_as_float(S_LO_BITS); }
  static __device__ __forceinline__ float top_p() { return __uint_as_float(TOP_P_BITS); }
};

/* Rows [r0, r1) of x [rows, COLS]: out[r] the column drawn. step: one int, or one per row (STEP_EACH). */
template <typename T, int COLS, bool STEP_EACH, typename Args>
__device__ __noinline__ void sample_rows(const T* x, const int* step, int* out, int r0, int r1, unsigned char* smem) {
  constexpr bool VEC = COLS * sizeof(T) % 16 == 0;
  constexpr int KB = SampleDtype<T>::KB;
  using Row = SampleRow<T, VEC>;
  const int top_k = Args::top_k;
  const float top_p = Args::top_p();
  int* amax = (int*)smem;
  int* ired = (int*)(smem + SAMPLE_ARGMAX_BYTES);
  int* slot = (int*)(smem + SAMPLE_SLOT_AT);
  const int th = threadIdx.x;
  int round = 0;
  for (int r = r0; r < r1; ++r, ++round) {
    const Row row{x + (long long)r * COLS, COLS / Row::P};
    int key = ARGMAX_NONE_KEY, col = ARGMAX_NONE_COL;
    sample_each(row, [&](int i, const typename Row::Raw& raw) {
#pragma unroll
      for (int e = 0; e < Row::P; ++e) {
        const unsigned b = row.bits(raw, e);
        const int k = argmax_key(b >> (KB - 1), b & ((1u << (KB - 1)) - 1u), SampleDtype<T>::INF);
        if (k > key) {  // columns grow: an equal key keeps the earlier one
          key = k;
          col = row.column(i, e);
        }
      }
    });
    argmax_team<ROW_THREADS>(key, col, amax, round, th);
    const float m = SampleDtype<T>::value(SampleDtype<T>::bits(x[(long long)r * COLS + col]));
    if (!(fabsf(m) < ARK_INF) || top_k == 1 || COLS == 1) {  // the same branch in every thread
      if (th == 0) out[r] = col;
      continue;
    }
    const SampleProb p{m, Args::s(), Args::s_lo()};
    const double u = sample_uniform(Args::seed, (unsigned)step[STEP_EACH ? r : 0], (unsigned)r);
    int drawn;
    if (top_k > 0 && top_k < COLS) {
      int above = 0, at = 0, target = 0;  // keys above tk, and at tk the columns up to ck
      const unsigned tk = sample_select<T, int, int>(row, [](int, unsigned) { return true; },
                                                     [](unsigned) { return 1; }, [=](int) { return top_k; }, above,
                                                     at, target, ired);
      const int n = top_k - above;  // of the `at` elements at tk, the n of the lowest columns
      const int ck = n < at ? sample_find<int, int>(row, [=](int, unsigned b) { return sample_ukey<T>(b) == tk ? 1 : 0; },
                                                    [=](int) { return n - 1; }, ired, slot)
                            : SAMPLE_ALL;
      const auto kept_k = [=](int c, unsigned uk) { return uk > tk || (uk == tk && c <= ck); };
      if (top_k <= SAMPLE_LIST) {
        const SampleList list = sample_list<T>(row, kept_k, top_k, smem);
        drawn = sample_kept<T>(list, [](int, unsigned) { return true; }, p, top_p, u, smem);
      } else {
        drawn = sample_kept<T>(row, kept_k, p, top_p, u, smem);
      }
    } else {
      drawn = sample_kept<T>(row, [](int, unsigned) { return true; }, p, top_p, u, smem);
    }
    if (th == 0) out[r] = drawn == SAMPLE_ALL ? col : drawn;
  }
}

}  // namespace ark

#endif
