"""The loop kernel of one model as readable CUDA C++: one `case` per op calling its op template
(include/ark/*.cuh) with the op's shapes, dtypes and tile sizes as constants, and the resident loop that
plays the plan's streams. Addresses, region ids and the plan's arrays are data (`Program`), so one model
compiles once whatever memory it runs on; the source's hash keys the compile cache."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ark_runtime.model import DTYPE_BYTES, Model, ModelError, Op, Tensor
from ark_runtime.kernel.records import layout_checks
from ark_runtime.plan import Plan
from ark_runtime.tiling import matmul_block

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
HEADERS = ("numeric.cuh", "elementwise.cuh", "rows.cuh", "matmul.cuh", "attention.cuh", "copy.cuh", "loop.cuh")
CTYPE = {"fp32": "float", "fp16": "__half", "bf16": "__nv_bfloat16", "int32": "int"}
THREADS = 256
BK, KB, WARPS = 32, 32, 8  # as matmul.cuh and attention.cuh
MAX_HEAD_DIM = 256
DEFAULT_SMEM = 48 * 1024
UNARY_CODE = {"gelu": "GELU", "silu": "SILU", "relu": "RELU", "exp": "EXP", "neg": "NEG", "sqrt": "SQRT",
              "rsqrt": "RSQRT", "identity": "IDENTITY"}
BINARY_CODE = {"add": "ADD", "sub": "SUB", "mul": "MUL", "div": "DIV", "max": "MAX"}
REDUCE_CODE = {"sum": "R_SUM", "max": "R_MAX", "mean": "R_MEAN"}


@dataclass(frozen=True)
class KernelSource:
    text: str
    smem_bytes: int  # dynamic shared memory the kernel launches with
    name: str = "ark_loop"

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


def headers_digest() -> str:
    h = hashlib.sha256()
    for name in HEADERS:
        h.update((INCLUDE_DIR / "ark" / name).read_bytes())
    return h.hexdigest()[:16]


PAD = 8  # matmul.cuh: shared-memory rows padded by this many elements
STAGE_BUDGET = 96 * 1024  # shared memory for a matmul's slices in flight


def matmul_stages(dtype: str, bm: int, bn: int) -> int:
    """Slices in flight: as many as fit the budget, 2 to 8 (small tiles, as at batch 1, need the most)."""
    slice_bytes = (bm * (BK + PAD) + BK * (bn + PAD)) * DTYPE_BYTES[dtype]
    return max(2, min(8, STAGE_BUDGET // slice_bytes))


def matmul_smem(dtype: str, bm: int, bn: int) -> int:
    esize = DTYPE_BYTES[dtype]
    stages = matmul_stages(dtype, bm, bn)
    return stages * (bm * (BK + PAD) + BK * (bn + PAD)) * esize + (WARPS * 256 * 4 if dtype != "fp32" else 0)


def attention_smem(d: int) -> int:
    return (2 * KB * (d + 1) + WARPS * d) * 4


def _broadcast_map(name: str, t: Tensor, out: Tensor) -> str | None:
    """A struct mapping the output's flat index to `t`'s, or None when the shapes agree."""
    if t.shape == out.shape:
        return None
    shape = (1,) * (len(out.shape) - len(t.shape)) + t.shape
    terms = []
    out_stride, in_stride = 1, 1
    for d in reversed(range(len(out.shape))):
        if shape[d] != 1:
            terms.append(f"(f / {out_stride}ll % {out.shape[d]}) * {in_stride}ll")
        out_stride *= out.shape[d]
        in_stride *= shape[d]
    body = " + ".join(reversed(terms)) or "0"
    return (f"struct {name} {{  // {t.name}{list(t.shape)} broadcast to {list(out.shape)}\n"
            f"  static __device__ __forceinline__ long long at(long long f) {{ return {body}; }}\n}};")


class _Gen:
    def __init__(self, model: Model, plan: Plan):
        self.model, self.plan = model, plan
        self.structs: list[str] = []
        self.smem = 0
        self.asserts: list[str] = []

    def ptr(self, tid: int, const: bool = True) -> str:
        t = self.model.tensors[tid]
        return f"({'const ' if const else ''}{CTYPE[t.dtype]}*)T[{tid}]"

    def case(self, op: Op) -> str:
        ts = self.model.tensors
        out = ts[op.output]
        ins = [ts[i] for i in op.inputs]
        ct = CTYPE[out.dtype]
        o = self.ptr(out.id, const=False)
        x = [self.ptr(i.id) for i in ins]
        tile = "r0, r1, c0, c1"
        if op.kind == "unary":
            return f"ark::unary_tile<ark::{UNARY_CODE[op.fn]}, {ct}, ark::Same>({x[0]}, {o}, {out.cols}, {tile});"
        if op.kind == "binary":
            maps = []
            for j, t in enumerate(ins):
                name = f"Op{op.id}In{j}"
                s = _broadcast_map(name, t, out)
                if s:
                    self.structs.append(s)
                maps.append(name if s else "ark::Same")
            return (f"ark::binary_tile<ark::{BINARY_CODE[op.fn]}, {ct}, {maps[0]}, {maps[1]}>({x[0]}, {x[1]}, {o}, "
                    f"{out.cols}, {tile});")
        if op.kind == "fused":
            # every step for all of a thread's N elements before the next step: N chains side by side
            name = f"Fused{op.id}"
            each = "#pragma unroll\n    for (int u = 0; u < N; ++u)"
            members, body = [], []
            for j, t in enumerate(ins):
                s = _broadcast_map(f"{name}In{j}", t, out)
                if s:
                    self.structs.append(s)
                members.append(f"  const {CTYPE[t.dtype]}* in{j};")
                body.append(f"    float a{j}[N];\n{each} a{j}[u] = ark::ld(in{j}, "
                            f"{f'{name}In{j}::at(f[u])' if s else 'f[u]'});")
            steps = op.attr("steps")
            for k, (fn, *refs) in enumerate(steps):
                xs = ", ".join(f"a{j}[u]" if where == "in" else f"s{j}[u]" for where, j in refs)
                call = (f"ark::unary<ark::{UNARY_CODE[fn]}>({xs})" if fn in UNARY_CODE
                        else f"ark::binary<ark::{BINARY_CODE[fn]}>({xs})")
                body.append(f"    float s{k}[N];  // {fn}\n{each} s{k}[u] = {call};")
            self.structs.append(f"struct {name} {{  // {len(steps)} elementwise ops in registers\n"
                                + "\n".join(members) + "\n"
                                "  template <int N>\n"
                                "  __device__ __forceinline__ void batch(const long long (&f)[N], float (&v)[N]) const {\n"
                                + "\n".join(body) + f"\n{each} v[u] = s{len(steps) - 1}[u];\n  }}\n}};")
            args = ", ".join(x)
            return f"ark::map_tile({name}{{{args}}}, {o}, {out.cols}, {tile});"
        if op.kind == "reduce":
            return f"ark::reduce_rows<ark::{REDUCE_CODE[op.fn]}, {ct}>({x[0]}, {o}, {ins[0].cols}, r0, r1);"
        if op.kind == "softmax":
            return f"ark::softmax_rows<{ct}>({x[0]}, {o}, {out.cols}, r0, r1);"
        if op.kind in ("layernorm", "rmsnorm"):
            layer = op.kind == "layernorm"
            bias = x[2] if layer else "nullptr"
            return (f"ark::norm_rows<{ct}, {'true' if layer else 'false'}>({x[0]}, {x[1]}, {bias}, {o}, {out.cols}, "
                    f"{op.attr('eps')!r}f, r0, r1);")
        if op.kind == "matmul":
            a, b = ins
            bm, bn = matmul_block(a.rows, b.cols, self.plan.num_sms)
            vec = a.cols % 8 == 0 and b.cols % 8 == 0
            stages = matmul_stages(out.dtype, bm, bn)
            self.smem = max(self.smem, matmul_smem(out.dtype, bm, bn))
            self.asserts.append(f"static_assert(ark::matmul_smem<{ct}, {bm}, {bn}, {stages}>() == "
                                f"{matmul_smem(out.dtype, bm, bn)}, \"op {op.id}: codegen.py's matmul_smem\");")
            return (f"ark::matmul_tile<{ct}, {bm}, {bn}, {stages}, {'true' if vec else 'false'}>({x[0]}, {x[1]}, {o}, {a.rows}, "
                    f"{b.cols}, {a.cols}, {tile}, smem);")
        if op.kind == "attention":
            seq, e = ins[0].shape[-2], ins[0].shape[-1]
            d = e // op.attr("heads")
            if d > MAX_HEAD_DIM:
                raise ModelError(f"attention (op {op.id}): head dimension {d} is above the kernel's {MAX_HEAD_DIM}; "
                                 "use more heads")
            self.smem = max(self.smem, attention_smem(d))
            self.asserts.append(f"static_assert(ark::attention_smem<{d}>() <= SMEM_BYTES, \"op {op.id}\");")
            causal = "true" if op.attr("causal", True) else "false"
            return (f"{{ const int base = r0 / {seq} * {seq}; ark::attention_tile<{ct}, {d}, {causal}>({x[0]}, {x[1]}, "
                    f"{x[2]}, {o}, {seq}, {e}, base, r0 - base, r1 - base, c0, smem); }}")
        if op.kind == "rope":
            return (f"ark::rope_tile<{ct}>({x[0]}, {x[1]}, {x[2]}, {o}, {ins[0].shape[-2]}, {out.cols}, {tile});")
        if op.kind == "embedding":
            return (f"{{ const int bad = ark::embedding_rows<{ct}>({x[0]}, (const int*)T[{ins[1].id}], {o}, "
                    f"{op.attr('vocab')}, {out.cols}, r0, r1);\n"
                    f"      if (bad) return ((unsigned long long)ark::FAULT_BAD_INDEX << 32) | (unsigned)bad; }}")
        if op.kind == "copy":
            return (f"return ark::copy_tile(p, q, tile, {op.id}, T[{ins[0].id}], T[{out.id}], {out.nbytes}ull);")
        raise ModelError(f"op {op.id} ({op.kind}) has no op template")


LOOP = r"""
namespace ark {
/* The copy op: SM stores or the engine's queue, per the op's entry in p.copies (timed as every tile is). */
__device__ unsigned long long copy_tile(const Program& p, const arkdma_queue& q, int tile, int op, const void* src,
                                        void* dst, unsigned long long n) {
  const int4 how = p.copies[op];
  unsigned rc = ARKDMA_DEV_OK;
  if (how.x == 0) {
    sm_copy(src, dst, n);
    __threadfence_system();
    __syncthreads();
  } else if (threadIdx.x == 0) {
    rc = dma_copy(q, how.y, how.z, n);
  }
  return rc == ARKDMA_DEV_OK ? 0ull : ((unsigned long long)FAULT_DMA << 32) | rc;
}
}  // namespace ark

extern "C" __global__ void __launch_bounds__(THREADS, 2) ark_loop(ark::Program p, arkdma_queue q) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int begin = p.stream_start[blockIdx.x], end = p.stream_start[blockIdx.x + 1];
  for (unsigned long long it = 0;; ++it) {
    int stop = 0;
    if (threadIdx.x == 0) {
      // the host's go (CTA 0 reads the host's words, the others its copies), and no more than RING
      // iterations ahead of the slowest CTA (its arrival slot is free)
      // Volatile polls (no L1 invalidation per poll), one fence once the iteration may start.
      for (unsigned spins = 0;; ++spins) {
        const unsigned long long go = blockIdx.x == 0 ? ark::forward_go(p)
                                                      : *(volatile unsigned long long*)(p.finished + ark::GO_SEEN);
        if (go > it && it < *(volatile unsigned long long*)(p.finished + ark::RING) + ark::RING) break;
        if (ark::stopping(p) || ((blockIdx.x == 0 || (spins & 1023u) == 1023u) && ark::host_stop(p))) {
          stop = 1;
          break;
        }
        __nanosleep(spins < 64 ? 100 : 1000);
      }
      __threadfence();  // what the host and the other CTAs wrote before go is visible to this CTA's loads
    }
    if (__syncthreads_or(stop)) break;
    for (int i = begin; i < end && !stop; ++i) {
      const int4 in = p.ins[i];
      if (in.x == ark::INS_WAIT) {  // this wait and the ones right after it, together
        int n = 1;
        while (i + n < end && p.ins[i + n].x == ark::INS_WAIT) ++n;
        if (threadIdx.x < 32) stop = !ark::wait_all(p, p.ins + i, n, it);
        stop = __syncthreads_or(stop);
        i += n - 1;
      } else if (in.x == ark::INS_RUN) {
        const int4 t = p.tiles[in.y];
        const int2 c = p.tile_cols[in.y];
        if (threadIdx.x == 0) p.tile_ns[2 * in.y] = arkdma::now_ns();
        const unsigned long long f = gen::run_tile(p, q, in.y, t.x, t.y, t.z, c.x, c.y, smem);
        if (__syncthreads_or(f != 0ull)) {
          if (f != 0ull) ark::fault(p, (unsigned)(f >> 32), in.y, -1, 0ull, 0ull, f & 0xffffffffull);
          stop = 1;
        }
        if (threadIdx.x == 0) p.tile_ns[2 * in.y + 1] = arkdma::now_ns();
      } else if (threadIdx.x == 0) {
        ark::signal_counter(p, in.y);
      }
    }
    if (__syncthreads_or(stop)) break;
    if (threadIdx.x == 0) {
      // the slot's k-th use (iteration it = slot + k * RING) is complete at (k + 1) * gridDim.x arrivals
      __threadfence();
      const unsigned long long n = atomicAdd(p.finished + it % ark::RING, 1ull) + 1ull;
      if (n == (it / ark::RING + 1) * gridDim.x) {
        __threadfence_system();
        p.done_ns[it % ark::RING] = arkdma::now_ns();
        atomicMax(p.finished + ark::RING, it + 1);
        *(volatile unsigned long long*)&p.control->done = it + 1;
        __threadfence_system();
      }
    }
  }
}
"""


def generate(model: Model, plan: Plan) -> KernelSource:
    """The model's loop kernel; ModelError for an op the templates cannot run."""
    g = _Gen(model, plan)
    cases = []
    for op in model.ops:
        ins = ", ".join(f"{model.tensors[i].name}{list(model.tensors[i].shape)}" for i in op.inputs)
        out = model.tensors[op.output]
        cases.append(f"    case {op.id}: {{  // {op.kind} {op.fn}({ins}) -> {out.name}{list(out.shape)} {out.dtype}\n"
                     f"      {g.case(op)}\n      return 0ull;\n    }}")
    smem = max(g.smem, 16)
    head = [f"// The loop kernel of model {model.name!r}: {len(model.ops)} ops, {len(plan.tiles)} tiles, "
            f"{plan.num_sms} SMs (generated by ark_runtime/kernel/codegen.py; op templates in include/ark/).",
            f"// ark headers {headers_digest()}",
            *(f"#include <ark/{h}>" for h in HEADERS),
            f"#define THREADS {THREADS}",
            *layout_checks(),
            "namespace gen {",
            f"constexpr int SMEM_BYTES = {smem};  // dynamic shared memory at launch",
            "static_assert(SMEM_BYTES > 0, \"\");",
            *g.structs, *g.asserts,
            "",
            "/* Runs tile `tile` of op `op` on every thread of the CTA; non-zero (fault code << 32 | detail) when the",
            " * tile found bad input. */",
            "__device__ unsigned long long run_tile(const ark::Program& p, const arkdma_queue& q, int tile, int op, int r0,",
            "                                       int r1, int c0, int c1, unsigned char* smem) {",
            "  void* const* T = p.tensors;",
            "  switch (op) {",
            *cases,
            "  }",
            "  return 0ull;",
            "}",
            "}  // namespace gen"]
    # copy_tile is declared after run_tile uses it: declare it first
    proto = ("namespace ark { struct Program; __device__ unsigned long long copy_tile(const Program&, const arkdma_queue&, "
             "int, int, const void*, void*, unsigned long long); }")
    text = "\n".join(head[:2 + len(HEADERS)] + [proto] + head[2 + len(HEADERS):]) + "\n" + LOOP
    return KernelSource(text, smem)
