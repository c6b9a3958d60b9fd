/* The cast op (ops/cast.py): each element of a tile converted to another dtype, rounded once to nearest even. A
 * float is widened to fp32 (exact) and rounded to the output's type; an int32 goes to the output's type in one
 * conversion (cvt.rn from s32), so an id past 2^24 is not rounded twice. */
#ifndef ARK_CAST_CUH
#define ARK_CAST_CUH

#include "numeric.cuh"

namespace ark {

template <typename TO> __device__ __forceinline__ TO cast_int(int v);
template <> __device__ __forceinline__ float cast_int<float>(int v) { return __int2float_rn(v); }
template <> __device__ __forceinline__ __half cast_int<__half>(int v) { return __int2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 cast_int<__nv_bfloat16>(int v) { return __int2bfloat16_rn(v); }

template <typename TO, typename TI> __device__ __forceinline__ TO cast_value(const TI* x, long long i) {
  return from_float<TO>(ld(x, i));
}
template <typename TO> __device__ __forceinline__ TO cast_value(const int* x, long long i) {
  return cast_int<TO>(x[i]);
}

/* out[r][c] = x[r][c] as TO for rows [r0, r1), columns [c0, c1) of the 2-D view (both tensors `cols` wide). */
template <typename TI, typename TO>
__device__ void cast_tile(const TI* x, TO* out, int cols, int r0, int r1, int c0, int c1) {
  const int w = c1 - c0;
  const long long n = (long long)(r1 - r0) * w;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    const long long f = (long long)(r0 + (int)(i / w)) * cols + c0 + (int)(i % w);
    out[f] = cast_value<TO>(x, f);
  }
}

}  // namespace ark

#endif
