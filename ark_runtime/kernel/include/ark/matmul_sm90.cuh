/* Hopper matmul tile: out[r0:r1, c0:c1] = A[r0:r1, :] @ B[:, c0:c1], bf16/fp16 in, fp32 accumulation, on
 * warpgroup MMA (wgmma.mma_async m64nBNk16, both operands read from shared memory).
 *
 * Tile BM x BN per CTA of 256 threads (two warpgroups), BM 128 or 64, BN 256, 128 or 64; BN / 2 fp32 accumulators
 * per thread (128 at BN = 256, so the kernel is built with min-blocks 1 when a model uses this template):
 *   BM = 128: warpgroup 0 computes rows 0-63, warpgroup 1 rows 64-127, each with one m64nBNk16 per 16 of K.
 *   BM = 64: both warpgroups compute all 64 rows, on halves of each slice's K (warpgroup w the k16 steps 2w and
 *     2w + 1, one m64nBNk16 each), and add their sums through shared memory at the end: warpgroup w hands the
 *     other its sums of columns [(1 - w) BN / 2, (2 - w) BN / 2), then adds and stores its own half. (Splitting N
 *     instead would need n32 for BN = 64, a half of the 64-column swizzle panel B is stored in.)
 * K goes in BK = 64 slices through a ring of STAGES slices in shared memory (a slice: A BM x 64, 16 or 8 KiB,
 * and B 64 x BN, 32, 16 or 8 KiB).
 *
 * Loads, two ways into the same ring layout (both zero-fill rows, columns and K past the matrix):
 *   matmul_tile_sm90_tma (codegen's choice where a matmul has more tiles than SMs): TMA, one thread issuing a 2-D box copy per operand panel from tensor
 *     maps the host makes once the tensors have addresses (codegen lists them, ark_runtime/runtime.py encodes them
 *     after the tensor addresses in Program.tensors), completion counted on mbarriers;
 *   matmul_tile_sm90 (where all its tiles run at once): cp.async 16-byte copies by all 256 threads that write the 128-byte-swizzled
 *     layout directly.
 * K and N must be multiples of 8 (16-byte rows); the generated code only picks these templates then.
 *
 * Shared-memory layout (byte offsets from a 1024-byte aligned slice; "chunk" = 16 bytes = 8 elements):
 *   A, K-major, rows of 64 elements = 128 bytes:
 *     A(r, k) at r * 128 + ((k / 8) ^ (r % 8)) * 16 + (k % 8) * 2
 *   B, N-major ("transposed" for wgmma), in panels of 64 columns, each panel 64 k-rows of 128 bytes:
 *     B(k, c) at (c / 64) * 8192 + k * 128 + (((c % 64) / 8) ^ (k % 8)) * 16 + (c % 8) * 2
 * That is the 128-byte swizzle (address bits 4-6 XOR bits 7-9) the hardware applies to the absolute shared
 * address, hence the 1024-byte alignment of every slice (CUTLASS's Layout_K_SW128_Atom and Layout_MN_SW128_Atom).
 * Matrix descriptors (PTX ISA "Matrix Descriptor Format"; offsets in 16-byte units, layout type 1 = 128B swizzle;
 * LBO and SBO as CUTLASS's make_gmma_desc derives them from those canonical layouts):
 *   A (imm-trans-a 0, K-major): start = slice + (BM = 128: warpgroup * 64 rows * 128) + kk * 32 bytes (the kk-th
 *     16 of K within the 128-byte row; the hardware swizzles the computed address), LBO unused (1), SBO = 1024
 *     (from one 8-row group to the next).
 *   B (imm-trans-b 1, N-major): start = slice + BM * 128 + kk * 16 rows * 128, LBO = 8192 (from one 64-column
 *     panel to the next, along N; unused at BN = 64), SBO = 1024 (from one 8-row group of K to the next).
 *
 *   (kk is the k16 step within the slice: 0-3, or at BM = 64 2w and 2w + 1 for warpgroup w.)
 *
 * Pipeline of matmul_tile_sm90, per slice s: wait for this thread's copies of slice s (cp.async.wait_group),
 * fence.proxy.async (make the generic-proxy writes visible to the async proxy wgmma reads through), __syncthreads;
 * wgmma.fence, four wgmma (k 0-63; two per warpgroup at BM = 64), commit; start loading slice s + STAGES - 2 into
 * the buffer of slice s - 2; wgmma.wait_group 1 (slice s - 1's wgmma done: its buffer is free after the next
 * __syncthreads). So one slice multiplies while the next is queued on the tensor cores and STAGES - 2 load.
 * matmul_tile_sm90_tma's pipeline is described at the function.
 *
 * Compiled only for sm_90a (wgmma needs the arch-specific target): ARK_HAS_WGMMA is 0 elsewhere and the generated
 * code calls the WMMA template (matmul.cuh) instead.
 */
#ifndef ARK_MATMUL_SM90_CUH
#define ARK_MATMUL_SM90_CUH

#include "numeric.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ARK_HAS_WGMMA 1
#else
#define ARK_HAS_WGMMA 0
#endif
#if defined(ARK_REQUIRE_WGMMA) && defined(__CUDA_ARCH__) && !ARK_HAS_WGMMA
#error "ARK_REQUIRE_WGMMA: this compile has no wgmma (compile for sm_90a)"
#endif

namespace ark {
namespace sm90 {
constexpr int BK = 64;
template <int BM> __host__ __device__ constexpr int a_bytes() { return BM * BK * 2; }  // 16 or 8 KiB
template <int BM, int BN> __host__ __device__ constexpr int stage_bytes() { return a_bytes<BM>() + BK * BN * 2; }
}  // namespace sm90

/* Shared memory the template needs, in bytes: STAGES slices and 1 KiB to align them to 1024. (At BM = 64 the
 * warpgroups' exchange of sums, 256 * BN bytes, reuses the ring.) */
template <int BM, int BN, int STAGES>
__host__ __device__ constexpr int matmul_sm90_smem() {
  return STAGES * sm90::stage_bytes<BM, BN>() + 1024;
}

#if ARK_HAS_WGMMA
namespace sm90 {

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(full ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/* Ties the accumulators to this point of the program: the compiler may not move their uses across it (the
 * registers are written by the tensor cores until wgmma.wait_group says the group is done). */
template <int N> __device__ __forceinline__ void fence_acc(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/* A shared-memory matrix descriptor with 128-byte swizzle; lbo and sbo in bytes. */
__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
         ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);
}

/* mbarriers (PTX ISA "Parallel Synchronization and Communication Instructions: mbarrier") and the TMA copy of
 * one 2-D box (cp.async.bulk.tensor), for matmul_tile_sm90_tma. Addresses are shared-memory offsets. */
constexpr int MAX_BARRIERS = 32;
__device__ __forceinline__ unsigned barriers() {
  __shared__ alignas(8) unsigned long long bars[MAX_BARRIERS];  // one set per CTA, for whichever tile runs
  return (unsigned)__cvta_generic_to_shared(bars);
}
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_inval(unsigned bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
/* Until the barrier's phase with this parity has completed. */
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  asm volatile("{\n.reg .pred done;\nWAIT:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
/* The box at (x, y) (x the contiguous dimension) of the tensor map at `map` into shared memory at dst; its bytes
 * count against barrier bar's expected bytes. */
__device__ __forceinline__ void tma_2d(unsigned dst, const void* map, unsigned bar, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               ::"r"(dst), "l"(map), "r"(x), "r"(y), "r"(bar) : "memory");
}
/* Slice at k of the block at (r0, c0): A's box (BM rows) and B's 64-column panels, expected on barrier bar. */
template <int BM, int BN>
__device__ __forceinline__ void tma_slice(const void* map_a, const void* map_b, unsigned slice, unsigned bar, int k,
                                          int r0, int c0) {
  mbar_expect_tx(bar, stage_bytes<BM, BN>());
  tma_2d(slice, map_a, bar, k, r0);
#pragma unroll
  for (int p = 0; p < BN / 64; ++p) tma_2d(slice + a_bytes<BM>() + p * BK * 128, map_b, bar, c0 + 64 * p, k);
}

#define ARK_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                  "+f"(d[i + 6]), "+f"(d[i + 7])
#define ARK_D64(i) ARK_D8(i), ARK_D8(i + 8), ARK_D8(i + 16), ARK_D8(i + 24), ARK_D8(i + 32), ARK_D8(i + 40), \
                   ARK_D8(i + 48), ARK_D8(i + 56)
#define ARK_D32(i) ARK_D8(i), ARK_D8(i + 8), ARK_D8(i + 16), ARK_D8(i + 24)
#define ARK_REGS32                                                                                    \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "   \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define ARK_REGS64                                                                                    \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "   \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "   \
  "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, "   \
  "%59, %60, %61, %62, %63"
#define ARK_REGS128                                                                                   \
  ARK_REGS64 ", "                                                                                     \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, "   \
  "%83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, " \
  "%102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, "   \
  "%118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
/* d (+)= A(desc a) @ B(desc b): scale-d 1 (accumulate), no negation, A K-major (trans-a 0), B N-major (trans-b 1). */
#define ARK_WGMMA_N64(TY)                                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                               \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {" ARK_REGS32 "}, " \
               "%32, %33, p, 1, 1, 0, 1;\n}\n"                                           \
               : ARK_D32(0)                                                               \
               : "l"(da), "l"(db), "r"(1))
#define ARK_WGMMA_N128(TY)                                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" ARK_REGS64 "}, " \
               "%64, %65, p, 1, 1, 0, 1;\n}\n"                                            \
               : ARK_D64(0)                                                                \
               : "l"(da), "l"(db), "r"(1))
#define ARK_WGMMA_N256(TY)                                                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                               \
               "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {" ARK_REGS128 "}, " \
               "%128, %129, p, 1, 1, 0, 1;\n}\n"                                          \
               : ARK_D64(0), ARK_D64(64)                                                   \
               : "l"(da), "l"(db), "r"(1))

template <typename T, int BN> struct Wgmma;
template <> struct Wgmma<__nv_bfloat16, 64> {
  static __device__ __forceinline__ void run(float (&d)[32], unsigned long long da, unsigned long long db) {
    ARK_WGMMA_N64("bf16");
  }
};
template <> struct Wgmma<__half, 64> {
  static __device__ __forceinline__ void run(float (&d)[32], unsigned long long da, unsigned long long db) {
    ARK_WGMMA_N64("f16");
  }
};
template <> struct Wgmma<__nv_bfloat16, 128> {
  static __device__ __forceinline__ void run(float (&d)[64], unsigned long long da, unsigned long long db) {
    ARK_WGMMA_N128("bf16");
  }
};
template <> struct Wgmma<__nv_bfloat16, 256> {
  static __device__ __forceinline__ void run(float (&d)[128], unsigned long long da, unsigned long long db) {
    ARK_WGMMA_N256("bf16");
  }
};
template <> struct Wgmma<__half, 128> {
  static __device__ __forceinline__ void run(float (&d)[64], unsigned long long da, unsigned long long db) {
    ARK_WGMMA_N128("f16");
  }
};
template <> struct Wgmma<__half, 256> {
  static __device__ __forceinline__ void run(float (&d)[128], unsigned long long da, unsigned long long db) {
    ARK_WGMMA_N256("f16");
  }
};
#undef ARK_WGMMA_N256
#undef ARK_WGMMA_N128
#undef ARK_WGMMA_N64
#undef ARK_REGS128
#undef ARK_REGS64
#undef ARK_REGS32
#undef ARK_D64
#undef ARK_D32
#undef ARK_D8

__device__ __forceinline__ void st2(__nv_bfloat16* p, float x, float y) {
  *(__nv_bfloat162*)p = __floats2bfloat162_rn(x, y);
}
__device__ __forceinline__ void st2(__half* p, float x, float y) { *(__half2*)p = __floats2half2_rn(x, y); }
__device__ __forceinline__ void st2(float* p, float x, float y) { *(float2*)p = make_float2(x, y); }  // split-K sums

/* Slice s (k from s * BK) of A's rows r0.. and B's columns c0.. into the ring, one 16-byte chunk per cp.async.
 * A: BM * 8 chunks, thread t takes row t / 8 + 32 j (j < BM / 32), chunk t % 8. B: 64 rows of BN / 8 chunks,
 * thread t takes row t / (BN / 8) + (2048 / BN) j, chunk t % (BN / 8). Every row any thread writes has the same
 * row % 8 as its first, so one swizzled offset per thread serves all its chunks. */
template <typename T, int BM, int BN>
struct Loader {
  static constexpr int A_PASSES = BM / 32;      // 4 or 2
  static constexpr int CPR = BN / 8;            // B chunks per k-row
  static constexpr int RPP = 256 / CPR;         // B k-rows per pass of 256 threads (8, 16 or 32)
  static constexpr int PASSES = BK / RPP;       // 8, 4 or 2
  const T* a_src;                               // A(r0 + t / 8, t % 8 * 8)
  int lda;                                      // A's row stride (K, or the whole K where a tile takes a part)
  const T* b_src;                               // B(t / CPR, c0 + t % CPR * 8)
  unsigned a_dst, b_dst;                        // byte offsets within a slice's A and B
  int a_rows_ok;                                // bit j: row t / 8 + 32 j is inside the matrix
  int a_k, b_k;                                 // the thread's first k within a slice: t % 8 * 8, t / CPR
  bool b_col_ok;

  __device__ __forceinline__ Loader(const T* a, const T* b, int m, int n, int r0, int c0, int lda_) {
    const int t = threadIdx.x;
    const int ar = t >> 3, ac = t & 7;
    lda = lda_;
    a_dst = ar * 128 + ((ac ^ (ar & 7)) << 4);
    a_k = ac * 8;
    a_src = a + (long long)(r0 + ar) * lda + a_k;
    a_rows_ok = 0;
#pragma unroll
    for (int j = 0; j < A_PASSES; ++j) a_rows_ok |= (r0 + ar + 32 * j < m) << j;
    const int br = t / CPR, bc = t % CPR;
    b_dst = (bc >> 3) * (BK * 128) + br * 128 + (((bc & 7) ^ (br & 7)) << 4);
    b_k = br;
    b_src = b + (long long)br * n + c0 + bc * 8;
    b_col_ok = c0 + bc * 8 < n;
  }

  __device__ __forceinline__ void load(const T* a, const T* b, int n, int k, unsigned slice, int k0) const {
    const bool ak = k0 + a_k < k;
#pragma unroll
    for (int j = 0; j < A_PASSES; ++j) {
      const bool ok = ak && ((a_rows_ok >> j) & 1);
      cp_async16(slice + a_dst + j * 32 * 128, ok ? a_src + (long long)(32 * j) * lda + k0 : a, ok);
    }
    const unsigned sb = slice + a_bytes<BM>();
#pragma unroll
    for (int j = 0; j < PASSES; ++j) {
      const bool ok = b_col_ok && k0 + b_k + RPP * j < k;
      cp_async16(sb + b_dst + j * RPP * 128, ok ? b_src + (long long)(k0 + RPP * j) * n : b, ok);
    }
  }
};

/* Stores accumulator columns 8 i .. 8 i + 7 for I0 <= i < I1 of the thread's m64nBNk16 fragment (warp w of the
 * warpgroup holds rows 16 w + lane / 4 (+ 8); acc[4 i + 2 h + e] is row + 8 h, column 8 i + lane % 4 * 2 + e). */
template <typename T, int BN, int I0, int I1, typename Epi>
__device__ __forceinline__ void store_cols(const float (&acc)[BN / 2], T* out, int n, int row, int col, int r1,
                                           int c1, const Epi& epi) {
#pragma unroll
  for (int i = I0; i < I1; ++i) {
    const int c = col + 8 * i;  // even, and c1 is a multiple of 8: c and c + 1 are both inside or both out
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row + 8 * h;
      const long long f = (long long)r * n + c;
      if (r < r1 && c < c1) st2(out + f, epi(acc[4 * i + 2 * h], f), epi(acc[4 * i + 2 * h + 1], f + 1));
    }
  }
}

/* BM = 64, the warpgroups' exchange: x holds BN / 2 floats per thread index t of a warpgroup, sum j at
 * x[j * 128 + t] (consecutive threads, consecutive words). Warpgroup H keeps the sums of columns [H BN / 2,
 * (H + 1) BN / 2), acc[H Q .. H Q + Q) with Q = BN / 4, and hands over the other half. */
template <int BN, int H>
__device__ __forceinline__ void give_half(const float (&acc)[BN / 2], float* x, int t) {
  constexpr int Q = BN / 4, J0 = (1 - H) * Q;
#pragma unroll
  for (int j = J0; j < J0 + Q; ++j) x[j * 128 + t] = acc[j];
}
template <int BN, int H>
__device__ __forceinline__ void take_half(float (&acc)[BN / 2], const float* x, int t) {
  constexpr int Q = BN / 4, J0 = H * Q;
#pragma unroll
  for (int j = J0; j < J0 + Q; ++j) acc[j] += x[j * 128 + t];
}

}  // namespace sm90

namespace sm90 {
/* Both tiles: queue this warpgroup's KSTEPS wgmma on the slice at `slice` (its A rows at a_at, its B k-rows at b_at)
 * as one commit group. */
template <typename T, int BN, int KSTEPS>
__device__ __forceinline__ void multiply(float (&acc)[BN / 2], unsigned slice, unsigned a_at, unsigned b_at) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < KSTEPS; ++kk) {
    const unsigned long long da = desc(slice + a_at + kk * 32, 16, 1024);
    const unsigned long long db = desc(slice + b_at + kk * 16 * 128, BK * 128, 1024);
    Wgmma<T, BN>::run(acc, da, db);
  }
  wgmma_commit();
}

/* Words per row of the block of sums staged in the ring (staged_epilogue): the 8-word skew puts the four rows a
 * half-warp's 8-byte stores reach on different banks. */
template <int BN> __host__ __device__ constexpr int staged_row() { return BN + 8; }

/* A fused epilogue through the ring: the block's sums into shared memory (BM = 64: warpgroup 1's added to 0's), then
 * a loop, not unrolled, in which consecutive threads take consecutive column pairs of a row. Unrolled over every sum
 * (store_cols), an epilogue with an input to load and an erf to compute is inlined BN / 2 times per tile template,
 * tens of kilobytes of code that the loop kernel's instruction cache cannot hold; the stores are coalesced as well.
 * x: the ring, free once every wgmma and copy is done, at least BM * staged_row<BN>() floats (finish checks). */
template <int BM, int BN, typename TO, typename Epi>
__device__ __forceinline__ void staged_epilogue(const float (&acc)[BN / 2], TO* out, int n, int r0, int r1, int c0,
                                                int c1, float* x, const Epi& epi) {
  constexpr int LD = staged_row<BN>(), PAIRS = BN / 2;
  const int wg = threadIdx.x >> 7;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int row = (BM == 128 ? wg * 64 : 0) + warp * 16 + (lane >> 2);
  const int col = (lane & 3) * 2;
  __syncthreads();  // every warp is past its last read of the ring
  if (BM == 128 || wg == 0) {
#pragma unroll
    for (int i = 0; i < BN / 8; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *(float2*)(x + (row + 8 * h) * LD + col + 8 * i) = make_float2(acc[4 * i + 2 * h], acc[4 * i + 2 * h + 1]);
  }
  if constexpr (BM == 64) {
    __syncthreads();
    if (wg == 1) {
#pragma unroll
      for (int i = 0; i < BN / 8; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float2* p = (float2*)(x + (row + 8 * h) * LD + col + 8 * i);
          const float2 v = *p;
          *p = make_float2(v.x + acc[4 * i + 2 * h], v.y + acc[4 * i + 2 * h + 1]);
        }
    }
  }
  __syncthreads();
#pragma unroll 1
  for (int q = threadIdx.x; q < BM * PAIRS; q += 256) {
    const int r = r0 + q / PAIRS, c = c0 + 2 * (q % PAIRS);
    if (r < r1 && c < c1) {
      const float2 v = *(const float2*)(x + (q / PAIRS) * LD + 2 * (q % PAIRS));
      const long long f = (long long)r * n + c;
      st2(out + f, epi(v.x, f), epi(v.y, f + 1));
    }
  }
}

/* The epilogue of both tiles: every thread's sums of the block (BM = 64: the warpgroups' halves added through the
 * ring first) through `epi` to `out`, or with STAGED (matmul.py's sm90_epilogue) a fused epilogue through the ring
 * (staged_epilogue). Every copy into the ring is in and every wgmma done when it is called; RING: the ring's bytes. */
template <int BM, int BN, bool STAGED, int RING, typename TO, typename Epi>
__device__ __forceinline__ void finish(float (&acc)[BN / 2], TO* out, int n, int r0, int r1, int c0, int c1,
                                       unsigned char* smem, unsigned smem_at, unsigned base, const Epi& epi) {
  static_assert(!STAGED || RING >= BM * staged_row<BN>() * 4, "the ring holds the staged block of sums");
  if constexpr (STAGED && !IsNoEpi<Epi>::value) {
    staged_epilogue<BM, BN>(acc, out, n, r0, r1, c0, c1, (float*)(smem + (base - smem_at)), epi);
    return;
  }
  const int wg = threadIdx.x >> 7;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int row = r0 + (BM == 128 ? wg * 64 : 0) + warp * 16 + (lane >> 2);
  const int col = c0 + (lane & 3) * 2;
  if constexpr (BM == 128) {
    store_cols<TO, BN, 0, BN / 8>(acc, out, n, row, col, r1, c1, epi);
  } else {
    // add the warpgroups' sums through the ring (both warpgroups' wgmma are done once all pass this barrier); each
    // warpgroup then stores half of the columns
    __syncthreads();
    float* x = (float*)(smem + (base - smem_at));
    const int t = threadIdx.x & 127;
    if (wg == 0) give_half<BN, 0>(acc, x, t);
    else give_half<BN, 1>(acc, x, t);
    __syncthreads();
    if (wg == 0) {
      take_half<BN, 0>(acc, x, t);
      store_cols<TO, BN, 0, BN / 16>(acc, out, n, row, col, r1, c1, epi);
    } else {
      take_half<BN, 1>(acc, x, t);
      store_cols<TO, BN, BN / 16, BN / 8>(acc, out, n, row, col, r1, c1, epi);
    }
  }
}
}  // namespace sm90

/* The tile with cp.async loads; every thread of the CTA (256) calls it with the same arguments. smem:
 * matmul_sm90_smem<BM, BN, STAGES>() bytes of dynamic shared memory. A split-K part (split_k.py) passes A and B from
 * its first k, its part's k, A's whole row stride as lda, and fp32 sums as TO. */
template <typename T, int BM, int BN, int STAGES, bool STAGED = false, typename TO = T, typename Epi = NoEpi>
__device__ void matmul_tile_sm90(const T* a, const T* b, TO* out, int m, int n, int k, int r0, int r1, int c0, int c1,
                                 unsigned char* smem, int lda = 0, const Epi& epi = Epi()) {
  static_assert(BM == 128 || BM == 64, "BM is 128 or 64");
  static_assert(BN == 256 || BN == 128 || BN == 64, "BN is 256, 128 or 64");
  static_assert(STAGES >= 3, "a slice multiplying, one queued, one loading at least");
  constexpr int STAGE = sm90::stage_bytes<BM, BN>();
  static_assert(BM == 128 || STAGES * STAGE >= 256 * BN, "the ring holds the warpgroups' exchange of sums");
  constexpr int AHEAD = STAGES - 2;  // slices loading while one multiplies and one is queued
  constexpr int KSTEPS = sm90::BK / 16 / (BM == 64 ? 2 : 1);  // k16 steps per warpgroup per slice
  const unsigned smem_at = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned base = (smem_at + 1023u) & ~1023u;
  const int wg = threadIdx.x >> 7;
  const int slices = (k + sm90::BK - 1) / sm90::BK;
  const sm90::Loader<T, BM, BN> ld(a, b, m, n, r0, c0, lda ? lda : k);
  // BM = 128: warpgroup wg's 64 rows, all of K; BM = 64: all 64 rows, the k16 steps KSTEPS wg ..
  const unsigned a_at = BM == 128 ? wg * 64 * 128 : wg * KSTEPS * 32;
  const unsigned b_at = sm90::a_bytes<BM>() + (BM == 128 ? 0 : wg * KSTEPS * 16 * 128);

#pragma unroll
  for (int s = 0; s < AHEAD; ++s) {
    if (s < slices) ld.load(a, b, n, k, base + s * STAGE, s * sm90::BK);
    sm90::cp_async_commit();
  }
  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
  sm90::fence_acc(acc);

#pragma unroll 1  // K is a constant of the generated call: unrolled, a short K would copy the loop body per slice
  for (int s = 0; s < slices; ++s) {
    sm90::cp_async_wait<AHEAD - 1>();  // this thread's copies of slice s are in (groups commit in slice order)
    sm90::fence_proxy_async();  // ... and visible to the async proxy, which wgmma reads shared memory through
    __syncthreads();  // every thread's; and both warpgroups are done with slice s - 2
    const unsigned slice = base + (s % STAGES) * STAGE;
    sm90::multiply<T, BN, KSTEPS>(acc, slice, a_at, b_at);
    const int next = s + AHEAD;  // into the buffer of slice s - 2
    if (next < slices) ld.load(a, b, n, k, base + (next % STAGES) * STAGE, next * sm90::BK);
    sm90::cp_async_commit();
    sm90::wgmma_wait<1>();  // slice s - 1's wgmma done
    sm90::fence_acc(acc);
  }
  sm90::wgmma_wait<0>();
  sm90::fence_acc(acc);
  sm90::cp_async_wait<0>();
  sm90::finish<BM, BN, STAGED, STAGES * STAGE>(acc, out, n, r0, r1, c0, c1, smem, smem_at, base, epi);
}

/* The tile with TMA loads (cp.async.bulk.tensor), same blocks, ring and results as matmul_tile_sm90. map_a and
 * map_b are tensor maps (CUtensorMap, 128 bytes in global memory, made on the host: driver/gpu/tensor_maps.py) of
 * A (K x M: box 64 x BM) and B (N x K: box 64 x 64), both with the 128-byte swizzle, so each box lands in the
 * ring's layout above; past the matrix the copy fills zeros. k0: where this tile's K starts in A's columns and B's
 * rows (a split-K part's first k, else 0); k: its length.
 *
 * Thread 0 issues every copy. Per ring buffer two mbarriers: `full` (one arrival, thread 0's, with the slice's
 * bytes expected: complete when the copies have landed) and `empty` (two arrivals, one per warpgroup once its wgmma
 * of the slice are done). Slice s + STAGES goes into slice s's buffer once `empty` says both warpgroups are done
 * with it, so STAGES - 1 slices load while one multiplies: no __syncthreads in the loop, no per-thread copies. The
 * barriers are set up at the start of each tile and invalidated at its end (the loop kernel runs other templates
 * on the same shared memory in between). */
template <typename T, int BM, int BN, int STAGES, bool STAGED = false, typename TO = T, typename Epi = NoEpi>
__device__ void matmul_tile_sm90_tma(const void* map_a, const void* map_b, TO* out, int m, int n, int k, int k0,
                                     int r0, int r1, int c0, int c1, unsigned char* smem, const Epi& epi = Epi()) {
  static_assert(BM == 128 || BM == 64, "BM is 128 or 64");
  static_assert(BN == 256 || BN == 128 || BN == 64, "BN is 256, 128 or 64");
  static_assert(STAGES >= 2 && 2 * STAGES <= sm90::MAX_BARRIERS, "a full and an empty barrier per ring buffer");
  constexpr int STAGE = sm90::stage_bytes<BM, BN>();
  static_assert(BM == 128 || STAGES * STAGE >= 256 * BN, "the ring holds the warpgroups' exchange of sums");
  constexpr int KSTEPS = sm90::BK / 16 / (BM == 64 ? 2 : 1);
  const unsigned smem_at = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned base = (smem_at + 1023u) & ~1023u;
  const unsigned full = sm90::barriers(), empty = full + 8 * STAGES;
  const int wg = threadIdx.x >> 7;
  const int slices = (k + sm90::BK - 1) / sm90::BK;
  const unsigned a_at = BM == 128 ? wg * 64 * 128 : wg * KSTEPS * 32;
  const unsigned b_at = sm90::a_bytes<BM>() + (BM == 128 ? 0 : wg * KSTEPS * 16 * 128);
  (void)m;  // the tensor maps hold the matrix's extent

  if (threadIdx.x == 0) {
    for (int i = 0; i < STAGES; ++i) {
      sm90::mbar_init(full + 8 * i, 1);
      sm90::mbar_init(empty + 8 * i, 2);
    }
    sm90::fence_barrier_init();
  }
  sm90::fence_proxy_async();  // the last tile's generic writes to the ring come before the copies' writes
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES && s < slices; ++s)
      sm90::tma_slice<BM, BN>(map_a, map_b, base + s * STAGE, full + 8 * s, k0 + s * sm90::BK, r0, c0);
  }
  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
  sm90::fence_acc(acc);

#pragma unroll 1
  for (int s = 0; s < slices; ++s) {
    const int buf = s % STAGES;
    sm90::mbar_wait(full + 8 * buf, (s / STAGES) & 1);  // slice s has landed
    const unsigned slice = base + buf * STAGE;
    sm90::multiply<T, BN, KSTEPS>(acc, slice, a_at, b_at);
    sm90::wgmma_wait<1>();  // this warpgroup's wgmma of slice s - 1 are done
    sm90::fence_acc(acc);
    if (s > 0) {
      const int prev = (s - 1) % STAGES;
      if ((threadIdx.x & 127) == 0) sm90::mbar_arrive(empty + 8 * prev);
      const int next = s - 1 + STAGES;  // into slice s - 1's buffer, once both warpgroups are done with it
      if (threadIdx.x == 0 && next < slices) {
        sm90::mbar_wait(empty + 8 * prev, ((s - 1) / STAGES) & 1);
        sm90::tma_slice<BM, BN>(map_a, map_b, base + prev * STAGE, full + 8 * prev, k0 + next * sm90::BK, r0, c0);
      }
      __syncwarp();
    }
  }
  sm90::wgmma_wait<0>();
  sm90::fence_acc(acc);
  __syncthreads();  // every thread is past its last barrier wait
  if (threadIdx.x == 0) {
    for (int i = 0; i < 2 * STAGES; ++i) sm90::mbar_inval(full + 8 * i);
  }
  sm90::finish<BM, BN, STAGED, STAGES * STAGE>(acc, out, n, r0, r1, c0, c1, smem, smem_at, base, epi);
}
#endif  // ARK_HAS_WGMMA

}  // namespace ark

#endif
