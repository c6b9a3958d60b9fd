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

/* GELU (tanh form), SiLU and exp use the hardware's exp2 and reciprocal (one MUFU op each, no branch):
 * 0.5x(1 + tanh u) = x - x / (1 + e^(2u)). The accurate library forms branch to slow paths per element,
 * which keeps a fused chain from overlapping the elements a thread holds; these stay within a few float
 * ulps of them relative to the output's scale, and saturate correctly towards +-inf. */
template <int F> __device__ __forceinline__ float unary(float x) {
  if constexpr (F == GELU) return x - __fdividef(x, 1.0f + __expf(1.5957691216057308f * (x + 0.044715f * x * x * x)));
  else if constexpr (F == SILU) return __fdividef(x, 1.0f + __expf(-x));
  else if constexpr (F == RELU) return fmaxf(x, 0.0f);
  else if constexpr (F == EXP) return __expf(x);
  else if constexpr (F == NEG) return -x;
  else if constexpr (F == SQRT) return sqrtf(x);
  else if constexpr (F == RSQRT) return rsqrtf(x);
  else return x;
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
