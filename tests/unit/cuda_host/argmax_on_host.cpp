/* The argmax op's CUDA (ark/argmax.cuh, read unchanged) run on the host through cuda_on_host.h, for
 * tests/unit/test_op_argmax.py. Built with -DHOST_DTYPE=float|__half|__nv_bfloat16 and -DHOST_NT=32..256 (the team
 * a row). Reads ROWS COLS OFFSET, then the elements' bits row by row, on stdin; prints the column found in each row.
 * OFFSET elements come before the first row, so a nonzero one starts the rows off 16 bytes (the element-by-element
 * path). */
#include "cuda_on_host.h"

#include <cstdio>
#include <vector>

#include "ark/argmax.cuh"

template <typename T> T from_bits(unsigned b);
template <> float from_bits<float>(unsigned b) { return __uint_as_float(b); }
template <> __half from_bits<__half>(unsigned b) { return __half{(unsigned short)b}; }
template <> __nv_bfloat16 from_bits<__nv_bfloat16>(unsigned b) { return __nv_bfloat16{(unsigned short)b}; }

int main() {
  int rows, cols, offset;
  if (std::scanf("%d %d %d", &rows, &cols, &offset) != 3) return 3;
  std::vector<uint4> store(((size_t)(rows * cols + offset) * sizeof(HOST_DTYPE) + 15) / 16 + 1);  // 16-byte aligned
  HOST_DTYPE* x = reinterpret_cast<HOST_DTYPE*>(store.data()) + offset;
  for (size_t i = 0; i < (size_t)rows * cols; ++i) {
    unsigned b;
    if (std::scanf("%u", &b) != 1) return 3;
    x[i] = from_bits<HOST_DTYPE>(b);
  }
  std::vector<int> out(rows, -1);
  alignas(16) static unsigned char smem[ark::ROW_SMEM];
  const int split = rows / 2;  // two tiles of one CTA, as the loop kernel runs row blocks
  for (const auto& [r0, r1] : {std::pair<int, int>{0, split}, std::pair<int, int>{split, rows}})
    run_cta([&, r0 = r0, r1 = r1] { ark::argmax_rows<HOST_DTYPE, HOST_NT>(x, out.data(), cols, r0, r1, smem); });
  for (int v : out) std::printf("%d\n", v);
  return 0;
}
