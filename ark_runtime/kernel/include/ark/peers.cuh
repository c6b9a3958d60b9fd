/* The ops a World runs across GPUs (ops/reduce_peers.py, gather_peers.py): loads from peers' memory through the
 * addresses the runtime mapped (peer access or IPC), as any load. Every rank sums in rank order, so every rank's
 * all-reduce gives the same bits. */
#ifndef ARK_PEERS_CUH
#define ARK_PEERS_CUH

namespace ark {

template <typename T, int N>
struct PeerTensors {
  const T* at[N];
};

/* out[r][c] = sum over k (in order) of x_k[wr0 + r][wc0 + c], fp32 sums, for the tile's rows [r0, r1) and columns
 * [c0, c1) of the output's 2-D view (the inputs' rows in_cols wide, the output's out_cols). */
template <typename T, int N>
__device__ void reduce_peers_tile(const PeerTensors<T, N> x, T* out, int in_cols, int out_cols, int wr0, int wc0,
                                  int r0, int r1, int c0, int c1) {
  const int w = c1 - c0;
  const long long n = (long long)(r1 - r0) * w;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    const int r = r0 + (int)(i / w), c = c0 + (int)(i % w);
    const long long from = (long long)(wr0 + r) * in_cols + wc0 + c;
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < N; ++k) sum += ld(x.at[k], from);
    st(out, (long long)r * out_cols + c, sum);
  }
}

/* out[r][c] = part[r - wr0][c - wc0] for the tile's rows [r0, r1) and columns [c0, c1) of the output's 2-D view,
 * which lie in the part's window (its rows part_cols wide), values moved as they are. */
template <typename T>
__device__ void gather_window_tile(const T* part, T* out, int part_cols, int out_cols, int wr0, int wc0, int r0,
                                   int r1, int c0, int c1) {
  const int w = c1 - c0;
  const long long n = (long long)(r1 - r0) * w;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    const int r = r0 + (int)(i / w), c = c0 + (int)(i % w);
    out[(long long)r * out_cols + c] = part[(long long)(r - wr0) * part_cols + (c - wc0)];
  }
}

}  // namespace ark

#endif
