/* The embedding gather (ops/embedding.py): out row r = table row ids[r], an id outside [0, vocab) reported instead of
 * read.
 *
 * The whole CTA copies the tile's rows together, thread i taking pieces i, i + 256, ... of the rows laid end to end:
 * 16 bytes a piece where rows are whole pieces and both tensors start on 16 bytes, EMBEDDING_U loads in flight a
 * thread before their stores; else an element a piece. One row of a decode step (a few KiB) is then a load or two a
 * thread, not one warp's element after element (about 20 us on an H200 for a 2,048-wide bf16 row). */
#ifndef ARK_EMBEDDING_CUH
#define ARK_EMBEDDING_CUH

namespace ark {

constexpr int EMBEDDING_U = 4;  // 16-byte loads in flight a thread

/* Rows r0 .. r1 of out. Returns a bad row's index + 1 (0 when every id this thread read was in range); a bad row's
 * pieces are not written. */
template <typename T>
__device__ int embedding_rows(const T* table, const int* ids, T* out, int vocab, int cols, int r0, int r1) {
  int bad = 0;
  const bool pieces_whole = (cols * (int)sizeof(T)) % 16 == 0 &&
      ((reinterpret_cast<unsigned long long>(table) | reinterpret_cast<unsigned long long>(out)) & 15) == 0;
  if (pieces_whole) {
    const int per = cols * (int)sizeof(T) / 16;  // pieces a row
    const long long total = (long long)(r1 - r0) * per;
    const uint4* src = reinterpret_cast<const uint4*>(table);
    uint4* dst = reinterpret_cast<uint4*>(out);
#pragma unroll 1
    for (long long i0 = threadIdx.x; i0 < total; i0 += (long long)blockDim.x * EMBEDDING_U) {
      uint4 v[EMBEDDING_U];  // every load made (past the end: the last piece again, unstored), then the stores
      long long to[EMBEDDING_U];
#pragma unroll
      for (int u = 0; u < EMBEDDING_U; ++u) {
        const long long want = i0 + (long long)u * blockDim.x, i = want < total ? want : total - 1;
        const int r = r0 + (int)(i / per), p = (int)(i % per);
        const int id = ids[r];
        const bool ok = id >= 0 && id < vocab;
        if (!ok) bad = r + 1;
        v[u] = src[(long long)(ok ? id : 0) * per + p];
        to[u] = ok && want < total ? (long long)r * per + p : -1;
      }
#pragma unroll
      for (int u = 0; u < EMBEDDING_U; ++u)
        if (to[u] >= 0) dst[to[u]] = v[u];
    }
  } else {
    const long long total = (long long)(r1 - r0) * cols;
    for (long long i = threadIdx.x; i < total; i += blockDim.x) {
      const int r = r0 + (int)(i / cols), c = (int)(i % cols);
      const int id = ids[r];
      if (id < 0 || id >= vocab) {
        bad = r + 1;
        continue;
      }
      out[(long long)r * cols + c] = table[(long long)id * cols + c];
    }
  }
  return bad;
}

}  // namespace ark

#endif
