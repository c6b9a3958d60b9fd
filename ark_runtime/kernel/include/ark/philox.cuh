/* Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; Random123's philox4x32): a
 * counter-based generator, four 32-bit words of output a pure function of a 128-bit counter and a 64-bit key. The
 * sample op (sample.cuh) draws row r's uniform number from counter (step, r, 0, 0) under key (seed's low word, its
 * high word): the same numbers on every run and in ops/sample.py's NumPy copy, which tests/unit/test_op_sample.py
 * checks against Random123's known answers and against this file compiled for the host.
 *
 * Plain C++ where no CUDA compiler reads it (the host test builds it with the system's C++ compiler); under NVCC or
 * NVRTC, host-and-device functions with the device's multiply-high. */
#ifndef ARK_PHILOX_CUH
#define ARK_PHILOX_CUH

#if defined(__CUDACC__)
#define ARK_PHILOX_FN __host__ __device__ __forceinline__
#else
#define ARK_PHILOX_FN inline
#endif

namespace ark {

constexpr unsigned PHILOX_M0 = 0xD2511F53u, PHILOX_M1 = 0xCD9E8D57u;  // the round multipliers
constexpr unsigned PHILOX_W0 = 0x9E3779B9u, PHILOX_W1 = 0xBB67AE85u;  // the key's bump between rounds

struct Philox4 {
  unsigned v[4];
};

ARK_PHILOX_FN unsigned philox_mulhi(unsigned a, unsigned b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return (unsigned)(((unsigned long long)a * b) >> 32);
#endif
}

/* R rounds of Philox-4x32 on counter `c` under key (k0, k1): Random123's philox4x32_R. */
template <int R = 10>
ARK_PHILOX_FN Philox4 philox4x32(Philox4 c, unsigned k0, unsigned k1) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const unsigned hi0 = philox_mulhi(PHILOX_M0, c.v[0]), lo0 = PHILOX_M0 * c.v[0];
    const unsigned hi1 = philox_mulhi(PHILOX_M1, c.v[2]), lo1 = PHILOX_M1 * c.v[2];
    c = Philox4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  return c;
}

/* The sample op's uniform number of one row: the top 24 bits of the first word, times 2^-24, in [0, 1) and exact in
 * float (so the NumPy reference has the very same number). */
ARK_PHILOX_FN float sample_uniform(unsigned long long seed, unsigned step, unsigned row) {
  const Philox4 r = philox4x32<10>(Philox4{{step, row, 0u, 0u}}, (unsigned)seed, (unsigned)(seed >> 32));
  return (float)(r.v[0] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace ark

#endif
