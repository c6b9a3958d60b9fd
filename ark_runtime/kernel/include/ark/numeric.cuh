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

enum Fn : int { GELU, SILU, RELU, EXP, NEG, SQRT, RSQRT, IDENTITY, ADD, SUB, MUL, DIV, MAX };

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

/* 2^x on the FMA pipes, for the share of a fused chain's exponentials the SFU (16 results per clock per SM,
 * against 128 FMAs) cannot keep up with: x = j + f with j the nearest integer (the 1.5 * 2^23 rounding trick),
 * 2^f by a degree-5 polynomial on [-0.5, 0.5] (relative error 2.3e-7 in float), and j added to the exponent bits.
 * x is clamped to [-127, 127.99]: below, the result is subnormal (flushed to 0, as the SFU's is); above, 3.4e38
 * where the SFU gives inf. GELU and SiLU only take the reciprocal of 1 + that, to the same 0 (flushed), so exp
 * itself stays on the SFU. */
__device__ __forceinline__ float exp2_fma(float x) {
  x = fminf(fmaxf(x, -127.0f), 127.99f);
  const float t = x + 12582912.0f;
  const float f = x - (t - 12582912.0f);
  float p = 1.3276308309286833e-3f;
  p = fmaf(p, f, 9.675485081970692e-3f);
  p = fmaf(p, f, 5.550713092088699e-2f);
  p = fmaf(p, f, 2.4022120237350464e-1f);
  p = fmaf(p, f, 6.931469440460205e-1f);
  p = fmaf(p, f, 1.0000001192092896f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}

/* GELU (tanh form), SiLU and exp with one exp2 and (GELU, SiLU) one reciprocal each on the SFU, no branch; with
 * FMA_EXP2, GELU's and SiLU's exp2 is exp2_fma instead. The accurate library forms branch to slow paths per
 * element, which keeps a fused chain from overlapping the elements a thread holds; these stay within a few float
 * ulps of them relative to the output's scale, and saturate correctly towards +-inf. */
template <int F, bool FMA_EXP2 = false> __device__ __forceinline__ float unary(float x) {
  const auto e2 = [](float v) { return FMA_EXP2 ? exp2_fma(v) : ex2_approx(v); };
  if constexpr (F == GELU) return x - x * rcp_approx(1.0f + e2(x * fmaf(GELU_K2, x * x, GELU_K1)));
  else if constexpr (F == SILU) return x * rcp_approx(1.0f + e2(-LOG2E * x));
  else if constexpr (F == RELU) return fmaxf(x, 0.0f);
  else if constexpr (F == EXP) return ex2_approx(LOG2E * x);
  else if constexpr (F == NEG) return -x;
  else if constexpr (F == SQRT) return sqrtf(x);
  else if constexpr (F == RSQRT) return rsqrtf(x);
  else return x;
}

/* Of every SPLIT_OF elements a thread holds in a fused chain, the last SOFT_EXP compute GELU and SiLU with
 * exp2_fma instead of the SFU's exp2 (the reciprocal stays on the SFU), so the SFU and the FMA pipes finish
 * together. `u` is the element's place among the thread's (a constant once unrolled: no branch). */
constexpr int SPLIT_OF = 8, SOFT_EXP = 4;

template <int F> __device__ __forceinline__ float unary_mix(float x, int u) {
  return u % SPLIT_OF < SPLIT_OF - SOFT_EXP ? unary<F>(x) : unary<F, true>(x);
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
