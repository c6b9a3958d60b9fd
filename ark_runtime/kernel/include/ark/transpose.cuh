/* The transpose op (ops/transpose.py): out [..., B, A] = x [..., A, B] with its last two axes swapped, values
 * moved as they are (any 2- or 4-byte type). A tile writes rows [r0, r1) and columns [c0, c1) of the output's 2-D
 * view, whose row m * B + j is row j of matrix m. It goes through shared memory in 32 x 32 blocks: the CTA reads a
 * block along x's rows, then writes its transpose along the output's rows, so both sides are coalesced (the
 * padding column keeps the column reads off one bank). */
#ifndef ARK_TRANSPOSE_CUH
#define ARK_TRANSPOSE_CUH

namespace ark {

constexpr int TRANSPOSE_BLOCK = 32;
constexpr int TRANSPOSE_SMEM = TRANSPOSE_BLOCK * (TRANSPOSE_BLOCK + 1) * 4;  // bytes, for elements up to 4 bytes

template <typename T>
__device__ void transpose_tile(const T* x, T* out, int a, int b, int r0, int r1, int c0, int c1,
                               unsigned char* smem) {
  static_assert(sizeof(T) <= 4, "TRANSPOSE_SMEM holds elements of up to 4 bytes");
  constexpr int BS = TRANSPOSE_BLOCK, LD = TRANSPOSE_BLOCK + 1;
  T* s = (T*)smem;  // s[ii * LD + jj] = x[ib + ii][jb + jj] of the block in hand
  for (int m = r0 / b; (long long)m * b < r1; ++m) {  // each matrix the tile's rows reach
    const int j0 = max(r0 - m * b, 0), j1 = min(r1 - m * b, b);  // its rows of the output: columns of x
    const T* xm = x + (long long)m * a * b;
    T* om = out + (long long)m * b * a;
    for (int jb = j0; jb < j1; jb += BS) {
      for (int ib = c0; ib < c1; ib += BS) {
        const int nj = min(BS, j1 - jb), ni = min(BS, c1 - ib);
        for (int k = threadIdx.x; k < BS * BS; k += blockDim.x) {  // consecutive threads along a row of x
          const int ii = k / BS, jj = k % BS;
          if (ii < ni && jj < nj) s[ii * LD + jj] = xm[(long long)(ib + ii) * b + jb + jj];
        }
        __syncthreads();
        for (int k = threadIdx.x; k < BS * BS; k += blockDim.x) {  // consecutive threads along a row of out
          const int jj = k / BS, ii = k % BS;
          if (ii < ni && jj < nj) om[(long long)(jb + jj) * a + ib + ii] = s[ii * LD + jj];
        }
        __syncthreads();  // the block read out before the next one is written
      }
    }
  }
}

}  // namespace ark

#endif
