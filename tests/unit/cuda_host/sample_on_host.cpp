/* The sample op's CUDA (ark/sample.cuh, with ark/argmax.cuh and ark/philox.cuh, read unchanged) run on the host
 * through cuda_on_host.h, for tests/unit/test_op_sample.py. Built with -DDTYPE=float|__half|__nv_bfloat16,
 * -DHOST_COLS=n and -DHOST_STEP_EACH=true|false. Reads whitespace-separated integers on stdin, writes integers on stdout:
 *
 *   sample_on_host sample ROWS SPLIT S S_LO TOP_K TOP_P SEED   then the steps (ROWS of them, or one), then the
 *       logits' bits row by row: prints the column drawn in each row (rows [0, SPLIT) and [SPLIT, ROWS) as two
 *       tiles of one CTA; S, S_LO and TOP_P as float bits)
 *   sample_on_host uniform   then (seed, step, row) triples: prints sample_uniform's u times 2^24 for each
 *   sample_on_host philox ROUNDS   then (c0 c1 c2 c3 k0 k1) lines: prints the four words of each */
#include "cuda_on_host.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "ark/argmax.cuh"
#include "ark/philox.cuh"
#include "ark/sample.cuh"

template <typename T> T from_bits(unsigned b);
template <> float from_bits<float>(unsigned b) { return __uint_as_float(b); }
template <> __half from_bits<__half>(unsigned b) { return __half{(unsigned short)b}; }
template <> __nv_bfloat16 from_bits<__nv_bfloat16>(unsigned b) { return __nv_bfloat16{(unsigned short)b}; }

static unsigned long long arg(char** argv, int i) { return std::strtoull(argv[i], nullptr, 0); }

/* ark::SampleArgs's members, set at run time: one build serves every setting. */
struct HostArgs {
  static inline int top_k = 0;
  static inline unsigned long long seed = 0;
  static inline float s_, s_lo_, top_p_;
  static float s() { return s_; }
  static float s_lo() { return s_lo_; }
  static float top_p() { return top_p_; }
};

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "uniform") {
    unsigned long long seed;
    unsigned step, row;
    while (std::scanf("%llu %u %u", &seed, &step, &row) == 3)
      std::printf("%u\n", (unsigned)(ark::sample_uniform(seed, step, row) * 16777216.0f));
    return 0;
  }
  if (mode == "philox" && argc == 3) {
    const int rounds = (int)arg(argv, 2);
    ark::Philox4 c;
    unsigned k0, k1;
    while (std::scanf("%x %x %x %x %x %x", &c.v[0], &c.v[1], &c.v[2], &c.v[3], &k0, &k1) == 6) {
      const ark::Philox4 r = rounds == 7 ? ark::philox4x32<7>(c, k0, k1) : ark::philox4x32<10>(c, k0, k1);
      std::printf("%08x %08x %08x %08x\n", r.v[0], r.v[1], r.v[2], r.v[3]);
    }
    return 0;
  }
  if (mode != "sample" || argc != 9) {
    std::fprintf(stderr, "usage: see the comment at the top of sample_on_host.cpp\n");
    return 2;
  }
  const int rows = (int)arg(argv, 2), split = (int)arg(argv, 3);
  HostArgs::s_ = __uint_as_float((unsigned)arg(argv, 4));
  HostArgs::s_lo_ = __uint_as_float((unsigned)arg(argv, 5));
  HostArgs::top_k = (int)arg(argv, 6);
  HostArgs::top_p_ = __uint_as_float((unsigned)arg(argv, 7));
  HostArgs::seed = arg(argv, 8);
  std::vector<int> steps(HOST_STEP_EACH ? rows : 1);
  for (int& v : steps)
    if (std::scanf("%d", &v) != 1) return 3;
  // 16-byte aligned, as the runtime's tensors are
  std::vector<uint4> store(((size_t)rows * HOST_COLS * sizeof(HOST_DTYPE) + 15) / 16 + 1);
  HOST_DTYPE* x = reinterpret_cast<HOST_DTYPE*>(store.data());
  for (size_t i = 0; i < (size_t)rows * HOST_COLS; ++i) {
    unsigned b;
    if (std::scanf("%u", &b) != 1) return 3;
    x[i] = from_bits<HOST_DTYPE>(b);
  }
  std::vector<int> out(rows, -1);
  alignas(16) static unsigned char smem[ark::SAMPLE_SMEM];
  for (const auto& [r0, r1] : {std::pair<int, int>{0, split}, std::pair<int, int>{split, rows}})
    run_cta([&, r0 = r0, r1 = r1] {
      ark::sample_rows<HOST_DTYPE, HOST_COLS, HOST_STEP_EACH, HostArgs>(x, steps.data(), out.data(), r0, r1, smem);
    });
  for (int v : out) std::printf("%d\n", v);
  return 0;
}
