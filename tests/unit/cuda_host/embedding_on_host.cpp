/* The embedding op's CUDA (ark/embedding.cuh, read unchanged) run on the host through cuda_on_host.h, for
 * tests/unit/test_embedding_cuh.py. Built with -DHOST_DTYPE=float|__half|__nv_bfloat16. Reads VOCAB COLS ROWS R0 R1
 * OFFSET, then the table's bits row by row, then ROWS ids, on stdin; runs rows [R0, R1) as one tile of one CTA and
 * prints each thread's nonzero return (one line: the distinct values, or 0), then the output's bits row by row (a row
 * left unwritten keeps the bits 0xdead's pattern the output starts with). OFFSET elements come before the table and
 * the output, so a nonzero one starts them off 16 bytes (the element-by-element path). */
#include "cuda_on_host.h"

#include <cstdio>
#include <mutex>
#include <set>
#include <vector>

#include "ark/embedding.cuh"

template <typename T> unsigned to_bits(T v);
template <> unsigned to_bits<float>(float v) { return __float_as_uint(v); }
template <> unsigned to_bits<__half>(__half v) { return v.x; }
template <> unsigned to_bits<__nv_bfloat16>(__nv_bfloat16 v) { return v.x; }
template <typename T> T from_bits(unsigned b);
template <> float from_bits<float>(unsigned b) { return __uint_as_float(b); }
template <> __half from_bits<__half>(unsigned b) { return __half{(unsigned short)b}; }
template <> __nv_bfloat16 from_bits<__nv_bfloat16>(unsigned b) { return __nv_bfloat16{(unsigned short)b}; }

int main() {
  int vocab, cols, rows, r0, r1, offset;
  if (std::scanf("%d %d %d %d %d %d", &vocab, &cols, &rows, &r0, &r1, &offset) != 6) return 3;
  const size_t n_table = (size_t)vocab * cols + offset, n_out = (size_t)rows * cols + offset;
  std::vector<uint4> table_store(n_table * sizeof(HOST_DTYPE) / 16 + 2), out_store(n_out * sizeof(HOST_DTYPE) / 16 + 2);
  HOST_DTYPE* table = reinterpret_cast<HOST_DTYPE*>(table_store.data()) + offset;
  HOST_DTYPE* out = reinterpret_cast<HOST_DTYPE*>(out_store.data()) + offset;
  for (size_t i = 0; i < (size_t)vocab * cols; ++i) {
    unsigned b;
    if (std::scanf("%u", &b) != 1) return 3;
    table[i] = from_bits<HOST_DTYPE>(b);
  }
  std::vector<int> ids(rows);
  for (int& id : ids)
    if (std::scanf("%d", &id) != 1) return 3;
  for (size_t i = 0; i < (size_t)rows * cols; ++i) out[i] = from_bits<HOST_DTYPE>(0xdead);
  std::set<int> bad;
  std::mutex held;
  run_cta([&] {
    const int b = ark::embedding_rows<HOST_DTYPE>(table, ids.data(), out, vocab, cols, r0, r1);
    if (b) {
      std::lock_guard<std::mutex> lock(held);
      bad.insert(b);
    }
  });
  if (bad.empty()) std::printf("0");
  for (int b : bad) std::printf("%d ", b);
  std::printf("\n");
  for (size_t i = 0; i < (size_t)rows * cols; ++i) std::printf("%u\n", to_bits<HOST_DTYPE>(out[i]));
  return 0;
}
