/* Loads and stores of the model's dtypes as float, the activation functions, and warp reductions.
 * Every op template computes in float and rounds once, when it stores. */
#ifndef ARK_NUMERIC_CUH
#define ARK_NUMERIC_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define ARK_INF __int_as_float(0x7f800000)

namespace ark {

template <typename T> __device__ __forceinline__ float ld(const T* p, long long i);
template <> __device__ __forceinline__ float ld<float>(const float* p, long long i) { return p[i]; }
template <> __device__ __forceinline__ float ld<__half>(const __half* p, long long i) { return __half2float(p[i]); }
template <> __device__ __forceinline__ float ld<__nv_bfloat16>(const __nv_bfloat16* p, long long i) {
  return __bfloat162float(p[i]);
}

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T> __device__ __forceinline__ void st(T* p, long long i, float v) { p[i] = from_float<T>(v); }

/* What a matmul or a split-K sum does to each result before storing it: nothing, or an elementwise chain fused into
 * it (fusion.py; the generated code supplies the functor). `f` is the result's flat index in the output. */
struct NoEpi {
  __device__ __forceinline__ float operator()(float v, long long) const { return v; }
};
template <typename Epi> struct IsNoEpi { static constexpr bool value = false; };
template <> struct IsNoEpi<NoEpi> { static constexpr bool value = true; };

enum Fn : int { GELU, SILU, RELU, EXP, NEG, SQRT, RSQRT, IDENTITY, TANH, GELU_ERF, ADD, SUB, MUL, DIV, MAX };

/* The SFU's exp2 and reciprocal, one MUFU instruction each (flushing subnormals, as the kernels compile with -ftz):
 * exp2 within 2 ulp, the reciprocal within 1, and both saturate (exp2 of a large input is inf, the reciprocal of inf
 * is 0). __expf and __fdividef add a multiply and, for __fdividef, a range test and two scalings around the same
 * instructions. */
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

constexpr float LOG2E = 1.4426950408889634f;
/* GELU's tanh form as 0.5x(1 + tanh u) = x - x / (1 + e^(2u)), 2u = 2 sqrt(2/pi) (x + 0.044715 x^3), and e^(2u) =
 * 2^(x (GELU_K1 + GELU_K2 x^2)): three FP instructions to the exponent. */
constexpr float GELU_K1 = 1.5957691216057308f * LOG2E, GELU_K2 = 1.5957691216057308f * 0.044715f * LOG2E;

/* 1/d for d >= 1 on the FMA pipes, for the share of a fused chain's reciprocals the SFU cannot keep up with: a first
 * guess from the exponent bits (0x7EF311C3 - bits, within 5.1%), one cubic step (error e -> e^3) and one Newton step
 * (e -> e^2): within 7.6e-8 relative (1.3 float ulps). d is clamped to 2^100 first, where the guess still works:
 * GELU and SiLU only multiply x by the result, so 2^-100 for 1/inf changes no output (x - x * 2^-100 rounds to x;
 * x * 2^-100 underflows towards SiLU's own limit, 0). A NaN x stays NaN through the x it is multiplied by. */
__device__ __forceinline__ float rcp_fma(float d) {
  d = fminf(d, 0x1p100f);
  float r = __int_as_float(0x7EF311C3 - __float_as_int(d));
  float e = fmaf(-d, r, 1.0f);
  r = fmaf(r, fmaf(e, e, e), r);
  e = fmaf(-d, r, 1.0f);
  return fmaf(r, e, r);
}

/* GELU (tanh form), SiLU and exp with one exp2 on the SFU and (GELU, SiLU) one reciprocal, on the SFU or with
 * FMA_RCP on the FMA pipes (rcp_fma), no branch. The accurate library forms branch to slow paths per element, which
 * keeps a fused chain from overlapping the elements a thread holds; these stay within a few float ulps of them
 * relative to the output's scale, and saturate correctly towards +-inf. */
template <int F, bool FMA_RCP = false> __device__ __forceinline__ float unary(float x) {
  const auto rcp = [](float v) { return FMA_RCP ? rcp_fma(v) : rcp_approx(v); };
  if constexpr (F == GELU) return x - x * rcp(1.0f + ex2_approx(x * fmaf(GELU_K2, x * x, GELU_K1)));
  else if constexpr (F == SILU) return x * rcp(1.0f + ex2_approx(-LOG2E * x));
  else if constexpr (F == RELU) return fmaxf(x, 0.0f);
  else if constexpr (F == EXP) return ex2_approx(LOG2E * x);
  else if constexpr (F == NEG) return -x;
  else if constexpr (F == SQRT) return sqrtf(x);
  else if constexpr (F == RSQRT) return rsqrtf(x);
  // tanh x = 1 - 2 / (1 + e^(2x)): one exp2 and one reciprocal, saturating to +-1 (e^(2x) inf -> 1, 0 -> -1)
  else if constexpr (F == TANH) return 1.0f - 2.0f * rcp(1.0f + ex2_approx(2.0f * LOG2E * x));
  else if constexpr (F == GELU_ERF) return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  else return x;
}

/* Of every SPLIT_OF elements a thread holds in a fused chain, the last SOFT_RCP take GELU's and SiLU's reciprocal on
 * the FMA pipes, the rest on the SFU (16 results a clock an SM, against 128 FMAs), so that the SFU and the issue
 * slots run out together: an SFU element costs two SFU results and about 8 instructions, an FMA one one SFU result
 * and about 13. `u` is the element's place among the thread's (a constant once unrolled: no branch). On H100s
 * (two sessions) chain64's tile took 4.78 / 4.59 / 4.43 / 4.34 / 4.39 / 4.59 us with 8 / 7 / 6 / 5 / 4 / 3 of 8 on
 * the FMA pipes; 4.55 with 3 reciprocals and 2 exp2s there, and 4.69 with 4 exp2s and no reciprocal (a polynomial
 * exp2 costs 12 instructions to spare one SFU result). */
constexpr int SPLIT_OF = 8, SOFT_RCP = 5;
static_assert(0 <= SOFT_RCP && SOFT_RCP <= SPLIT_OF, "a share of SPLIT_OF");

template <int F> __device__ __forceinline__ float unary_mix(float x, int u) {
  return u % SPLIT_OF < SPLIT_OF - SOFT_RCP ? unary<F>(x) : unary<F, true>(x);
}

template <int F> __device__ __forceinline__ float binary(float a, float b) {
  if constexpr (F == ADD) return a + b;
  else if constexpr (F == SUB) return a - b;
  else if constexpr (F == MUL) return a * b;
  else if constexpr (F == DIV) return a / b;
  else return fmaxf(a, b);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace ark

#endif
