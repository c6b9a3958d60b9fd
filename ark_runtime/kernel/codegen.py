"""The loop kernel of one model as readable CUDA C++: a `case` per distinct op (ops that do the same thing on other
tensors share one) calling its op template (include/ark/*.cuh) with the op's shapes, dtypes and tile sizes as
constants, and the resident loop that plays the plan's streams. Addresses, region ids and the plan's arrays are
data (`Program`), so one model compiles once whatever memory it runs on; the source's hash keys the compile
cache."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from driver.gpu.tensor_maps import TENSOR_MAP_BYTES
from ark_runtime.model import DTYPE_BYTES, Model, ModelError, Op, Tensor
from ark_runtime.kernel.records import layout_checks
from ark_runtime.plan import Plan
from ark_runtime.tiling import (OFF, SKINNY_PART_COLS, SM90_BK, attention_block, matmul_block, row_team, skinny,
                                skinny_cols, skinny_mma, sm90_matmul_block, split_block)

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
HEADERS = ("numeric.cuh", "elementwise.cuh", "rows.cuh", "matmul.cuh", "matmul_sm90.cuh", "gemv.cuh", "gemv_mma.cuh",
           "attention.cuh", "copy.cuh", "loop.cuh")
DIGESTED = (*HEADERS, "codes.h", "loop_kernel.cuh")  # every file a kernel's text includes: their digest keys the cache
CTYPE = {"fp32": "float", "fp16": "__half", "bf16": "__nv_bfloat16", "int32": "int"}
THREADS = 256
BK, KB, WARPS = 32, 32, 8  # as matmul.cuh and attention.cuh
MAX_HEAD_DIM = 256
MAX_SHARED_TENSORS = 2048  # tensor addresses the kernel keeps in shared memory (16 KiB); more are read from global
UNARY_CODE = {"gelu": "GELU", "silu": "SILU", "relu": "RELU", "exp": "EXP", "neg": "NEG", "sqrt": "SQRT",
              "rsqrt": "RSQRT", "identity": "IDENTITY"}
BINARY_CODE = {"add": "ADD", "sub": "SUB", "mul": "MUL", "div": "DIV", "max": "MAX"}
REDUCE_CODE = {"sum": "R_SUM", "max": "R_MAX", "mean": "R_MEAN"}


SM90_TMA_ENV = "ARK_SM90_TMA"  # "auto" (default: sm90_tma's rule), "1" every wgmma tile loads by TMA, "0" none does
MAPS_PER_OP = 2  # tensor maps per op after the tensor addresses: A's at 2 op, B's at 2 op + 1


def tensor_maps_at(num_tensors: int) -> int:
    """Where the tensor maps start in Program.tensors, in 8-byte words: after the addresses, 64-byte aligned. (Not a
    Program field of their own: one more pointer made that struct 128 bytes and mlp-b8 and mlp-b64 5-7% slower
    on the H200, with the kernels otherwise the same.)"""
    return -(-num_tensors // 8) * 8


def sm90_tma(tiles: int, num_sms: int) -> bool:
    """Whether a matmul of `tiles` wgmma tiles loads them by TMA (matmul_tile_sm90_tma) rather than by cp.async. The
    rule, from one H200 session (bench/results/h200/experiments/tma_raster): TMA where there are more tiles than SMs,
    so a CTA runs tile after tile of one matmul (8192^3: 1,752 us against 1,984 with cp.async); cp.async where all
    tiles run in one wave, as in the MLP and the transformer block (mlp-b8 79.4 us with cp.async against 91.9 with
    TMA, block-s128 47.7 against 52.7): there each CTA runs one short tile per op, and TMA's start (barriers set up,
    a tensor map read from global memory) is not won back."""
    how = os.environ.get(SM90_TMA_ENV, "auto").strip().lower()
    if how in OFF:
        return False
    if how in ("1", "on", "yes", "true"):
        return True
    return tiles > num_sms


@dataclass(frozen=True)
class TensorMapSpec:
    """A tensor map the kernel's TMA loads read (matmul_sm90.cuh's matmul_tile_sm90_tma): the host encodes it over
    the tensor's memory once the tensor has an address (driver/gpu/tensor_maps.py), as map `index` after the tensor
    addresses in Program.tensors (tensor_maps_at)."""

    index: int  # MAPS_PER_OP * op + (0 for A, 1 for B)
    tensor: int  # the tensor's id
    rows: int
    cols: int  # contiguous, elements
    box_rows: int
    box_cols: int


@dataclass(frozen=True)
class KernelSource:
    text: str
    smem_bytes: int  # dynamic shared memory the kernel launches with
    name: str = "ark_loop"
    graph_copies: bool = False  # launches device graphs: relocatable code linked with the device runtime
    tensor_maps: tuple[TensorMapSpec, ...] = ()
    op_cases: tuple[int, ...] = ()  # per op: its body's case in run_tile's switch (the run instruction carries it)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


def headers_digest() -> str:
    h = hashlib.sha256()
    for name in DIGESTED:
        h.update((INCLUDE_DIR / "ark" / name).read_bytes())
    return h.hexdigest()[:16]


PAD = 8  # matmul.cuh: shared-memory rows padded by this many elements
STAGE_BUDGET = 96 * 1024  # shared memory for a matmul's slices in flight
# The weight-streaming tiles' (gemv.cuh, gemv_mma.cuh) slices in flight at most. Their matmuls read the weights once,
# every SM at once, at HBM's pace: on an H100 more slices in flight made mlp-b8 slower (5: 92.5-92.9 us, 7 and 8:
# 93.7-94.1), 4 the fastest (92.1-92.2; mlp-b1 90.4 -> 90.0-90.1), 3 slower again (94.2-94.3);
# bench/results/h100/experiments/gemv_mma_stages/
WEIGHT_STAGES = 4


def matmul_stages(dtype: str, bm: int, bn: int) -> int:
    """Slices in flight: as many as fit the budget, 2 to 8 (small tiles, as at batch 1, need the most)."""
    slice_bytes = (bm * (BK + PAD) + BK * (bn + PAD)) * DTYPE_BYTES[dtype]
    return max(2, min(8, STAGE_BUDGET // slice_bytes))


def matmul_smem(dtype: str, bm: int, bn: int) -> int:
    esize = DTYPE_BYTES[dtype]
    stages = matmul_stages(dtype, bm, bn)
    return stages * (bm * (BK + PAD) + BK * (bn + PAD)) * esize + (WARPS * 256 * 4 if dtype != "fp32" else 0)


GEMV_SUMS = 64  # gemv.cuh: a thread's fp32 sums (rows x its columns) at most, so two CTAs' registers fit an SM
GEMV_THREAD_SLICE = 64  # bytes of B a thread copies per slice: 16 KiB a slice


@dataclass(frozen=True)
class GemvConfig:
    """gemv.cuh's constants for a skinny matmul of `m` rows in tiles of `w` columns."""

    m: int
    w: int
    cpt: int  # columns per thread: one 16-byte load, halved while m x cpt sums exceed GEMV_SUMS
    rpt: int  # rows per thread per slice
    stages: int  # slices in flight

    @staticmethod
    def of(dtype: str, m: int, w: int) -> GemvConfig:
        esize = DTYPE_BYTES[dtype]
        cpt = 16 // esize
        while m * cpt > GEMV_SUMS:
            cpt //= 2
        if cpt * esize < 8 or w % cpt or 32 % (w // cpt):
            raise ModelError(f"a skinny matmul of {m} rows in {w}-column tiles does not fit gemv.cuh")
        rpt = GEMV_THREAD_SLICE // (cpt * esize)
        slice_bytes = rpt * (THREADS * cpt // w) * (w + m) * esize
        return GemvConfig(m, w, cpt, rpt, max(2, min(WEIGHT_STAGES, STAGE_BUDGET // slice_bytes)))

    def smem(self, dtype: str) -> int:
        """As gemv.cuh's gemv_smem: the slices in flight, or the reduction's sums per warp."""
        ks = self.rpt * (THREADS * self.cpt // self.w)
        return max(self.stages * ks * (self.w + self.m) * DTYPE_BYTES[dtype], THREADS // 32 * self.m * self.w * 4)


GEMV_MMA_SLICE = 16 * 1024  # gemv_mma.cuh: bytes of B per slice


@dataclass(frozen=True)
class GemvMmaConfig:
    """gemv_mma.cuh's constants for a skinny bf16/fp16 matmul of `m` rows (tiling.skinny_mma) in tiles of `w`
    columns: a slice is 16 KiB of B and A's m rows (padded to 8 or 16) over the same K."""

    m: int
    w: int
    stages: int  # slices in flight

    @staticmethod
    def of(m: int, w: int) -> GemvMmaConfig:
        if w not in (32, 64, 128):  # tiling.SKINNY_WIDTHS: A's rows 128 bytes a slice or more, 16-column blocks
            raise ModelError(f"a skinny matmul of {m} rows in {w}-column tiles does not fit gemv_mma.cuh")
        return GemvMmaConfig(m, w, max(2, min(WEIGHT_STAGES, STAGE_BUDGET // GemvMmaConfig.slice_bytes(m, w))))

    @staticmethod
    def slice_bytes(m: int, w: int) -> int:
        ks = GEMV_MMA_SLICE // (2 * w)
        return GEMV_MMA_SLICE + -(-m // 8) * 8 * ks * 2

    def smem(self) -> int:
        """As gemv_mma.cuh's gemv_mma_smem: the slices in flight, or every warp's sums."""
        split = THREADS // 32 // (self.w // 16)
        return max(self.stages * self.slice_bytes(self.m, self.w), split * -(-self.m // 8) * 8 * self.w * 4)


SM90_RING = 192 * 1024  # its ring of slices at most: with 1 KiB of alignment and the loop kernel's own static
#                         shared memory (2 KiB, and 16 KiB at most of tensor addresses) under the SM's 227 KiB
SM90_ARCH_MARK = "#define ARKDMA_ARCH_SPECIFIC 1"  # driver/gpu/compile.py: compile for sm_90a on an H100


def sm90_stage_bytes(bm: int, bn: int) -> int:
    """A slice of matmul_sm90.cuh's ring: A bm x 64 and B 64 x bn, 2-byte elements."""
    return (bm + bn) * SM90_BK * 2


def sm90_stages(bm: int, bn: int, k: int) -> int:
    """Slices in matmul_sm90.cuh's ring: as many as SM90_RING holds (4 at 128 x 256, 6 at 128 x 128, 8 at 64 x 128,
    12 at 64 x 64: the narrow blocks of small-M, weight-bound matmuls keep the most bytes in flight), but no more
    than K has slices plus the two the pipeline multiplies and queues; 3 at the least."""
    return max(3, min(SM90_RING // sm90_stage_bytes(bm, bn), -(-k // SM90_BK) + 2))


def matmul_sm90_smem(bm: int, bn: int, k: int) -> int:
    """As matmul_sm90.cuh's matmul_sm90_smem: the ring and 1 KiB to align it to the 128-byte swizzle's 1024-byte
    pattern (at bm = 64 the warpgroups' exchange of sums, 256 * bn bytes, fits in the ring)."""
    return sm90_stages(bm, bn, k) * sm90_stage_bytes(bm, bn) + 1024


ROW_SMEM = 256  # rows.cuh's ROW_SMEM: the team reductions' slots
ATT_STAGE_BUDGET = 80 * 1024  # attention.cuh: bytes for the stages of K and V in flight


@dataclass(frozen=True)
class AttentionShape:
    """attention.cuh's AttnShape<D, BQ>: the tensor-core tile's constants for head dimension d and bq queries."""

    d: int
    bq: int

    @property
    def dp(self) -> int:  # head dimension padded to the MMA's k
        return -(-self.d // 16) * 16

    @property
    def ld(self) -> int:  # shared-memory row stride, elements
        return self.dp + 8

    @property
    def splits(self) -> int:  # key splits: 8 warps over bq / 16 query groups
        return WARPS // (self.bq // 16)

    @property
    def kw(self) -> int:  # keys per warp per stage
        return 32 if 2 * 2 * 32 * self.splits * self.ld * 2 <= ATT_STAGE_BUDGET else 16

    @property
    def stages(self) -> int:  # stages of K and V in flight
        return 2 if 2 * (2 * self.kw * self.splits * self.ld * 2) <= ATT_STAGE_BUDGET else 1

    @property
    def smem(self) -> int:
        stage = 2 * self.kw * self.splits * self.ld * 2
        dc = min(self.dp, 128)
        merge = WARPS * 16 * (dc + 8 + 2) * 4
        return self.bq * self.ld * 2 + max(self.stages * stage, merge)


def attention_smem(dtype: str, d: int, bq: int) -> int:
    """Shared memory of an attention tile: the tensor-core tile's (bf16, fp16), or the scalar fp32 tile's."""
    if dtype == "fp32":
        return (2 * KB * (d + 1) + WARPS * d) * 4
    return AttentionShape(d, bq).smem


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


def _step_call(fn: str, refs: list[tuple], index: str, mix: str = "") -> str:
    """One fused step's call: operand ("in", j) is a{j}, ("step", k) is s{k}, each followed by `index`. With `mix`
    (the element's place among a thread's), a unary step shares its exponentials between the SFU and the FMA pipes
    (numeric.cuh's unary_mix)."""
    xs = ", ".join(f"{'a' if where == 'in' else 's'}{j}{index}" for where, j in refs)
    if fn not in UNARY_CODE:
        return f"ark::binary<ark::{BINARY_CODE[fn]}>({xs})"
    return f"ark::unary_mix<ark::{UNARY_CODE[fn]}>({xs}, {mix})" if mix else f"ark::unary<ark::{UNARY_CODE[fn]}>({xs})"


class _Gen:
    def __init__(self, model: Model, plan: Plan):
        self.model, self.plan = model, plan
        self.wgmma_ok = plan.device.get("wgmma", True)  # as the plan was cut (DeviceSpec.wgmma)
        self.structs: list[str] = []
        self.smem = 0
        self.asserts: list[str] = []
        self.wgmma = False  # a matmul uses matmul_sm90.cuh (then one CTA per SM: ARK_MIN_BLOCKS 1 on sm_90a)
        self.maps: list[TensorMapSpec] = []
        self.written = {op.output for op in model.ops}
        self.early: set[int] = set()  # ops whose tiles load their first weight slices before their waits

    def tensor_maps(self, op: Op, a: Tensor, b: Tensor, bm: int) -> str:
        """The arguments naming op's tensor maps of A (box 64 x bm) and B (box 64 x 64), which the host makes."""
        first = MAPS_PER_OP * op.id
        self.maps += [TensorMapSpec(first, a.id, a.rows, a.cols, bm, SM90_BK),
                      TensorMapSpec(first + 1, b.id, b.rows, b.cols, SM90_BK, 64)]
        maps = f"(const unsigned char*)(p.tensors + TENSOR_MAPS_AT) + {MAPS_PER_OP * TENSOR_MAP_BYTES} * op"
        return f"{maps}, {maps} + {TENSOR_MAP_BYTES}"

    def epilogue(self, op: Op, out: Tensor, extras: list[Tensor]) -> str:
        """The trailing argument `, Epi<id>{...}` for an op with elementwise ops fused into its stores (fusion.py:
        operand ("in", 0) is the op's own result, ("in", j) its extra input j - 1), or nothing. The functor's structs
        join the kernel's."""
        steps = op.attr("epilogue")
        if not steps:
            return ""
        name = f"Epi{op.id}"
        members, loads, args = [], [], []
        for j, t in enumerate(extras, start=1):
            m = _broadcast_map(f"{name}In{j}", t, out)
            if m:
                self.structs.append(m)
            members.append(f"  const {CTYPE[t.dtype]}* in{j};")
            loads.append(f"    const float a{j} = ark::ld(in{j}, {f'{name}In{j}::at(f)' if m else 'f'});")
            args.append(self.ptr(t.id))
        body = []
        for k, (fn, *refs) in enumerate(steps):
            body.append(f"    const float s{k} = {_step_call(fn, refs, '')};  // {fn}")
        self.structs.append(f"struct {name} {{  // {len(steps)} elementwise ops fused into the op's stores\n"
                            + "".join(m + "\n" for m in members)
                            + "  __device__ __forceinline__ float operator()(float a0, long long f) const {\n"
                            + "".join(line + "\n" for line in loads + body)
                            + f"    return s{len(steps) - 1};\n  }}\n}};")
        return f", {name}{{{', '.join(args)}}}"

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
                call = _step_call(fn, refs, "[u]", mix="u")
                body.append(f"    float s{k}[N];  // {fn}\n{each} s{k}[u] = {call};")
            self.structs.append(f"struct {name} {{  // {len(steps)} elementwise ops in registers\n"
                                + "\n".join(members) + "\n"
                                "  template <int N>\n"
                                "  __device__ __forceinline__ void batch(const long long (&f)[N], float (&v)[N]) const {\n"
                                + "\n".join(body) + f"\n{each} v[u] = s{len(steps) - 1}[u];\n  }}\n}};")
            args = ", ".join(x)
            return f"ark::map_tile({name}{{{args}}}, {o}, {out.cols}, {tile});"
        if op.kind in ("reduce", "softmax", "layernorm", "rmsnorm"):
            # a team of nt threads per row, the row in registers (tiling.row_team); 256 bytes for the reductions
            cols = ins[0].cols
            nt = row_team(out.dtype, out.rows, cols, self.plan.num_sms)
            self.smem = max(self.smem, ROW_SMEM)
            self.asserts.append(f"static_assert(ark::ROW_SMEM <= {ROW_SMEM}, \"op {op.id}: codegen.py's ROW_SMEM\");")
            if op.kind == "reduce":
                return f"ark::reduce_rows<ark::{REDUCE_CODE[op.fn]}, {ct}, {cols}, {nt}>({x[0]}, {o}, r0, r1, smem);"
            if op.kind == "softmax":
                return f"ark::softmax_rows<{ct}, {cols}, {nt}>({x[0]}, {o}, r0, r1, smem);"
            layer = op.kind == "layernorm"
            bias = x[2] if layer else "nullptr"
            return (f"ark::norm_rows<{ct}, {'true' if layer else 'false'}, {cols}, {nt}>({x[0]}, {x[1]}, {bias}, {o}, "
                    f"{op.attr('eps')!r}f, r0, r1, smem);")
        if op.kind == "matmul" and op.attr("k_splits"):
            return self._split_case(op, ins[0], ins[1], out, x, o)
        if op.kind == "split_sum":
            epi = self.epilogue(op, out, ins[1:])
            return (f"ark::split_sum_tile<{op.attr('k_splits')}, {ct}>({x[0]}, {o}, {out.rows * out.cols}ll, "
                    f"{out.cols}, {tile}{epi});")
        if op.kind == "matmul" and sm90_matmul_block(ins[0].rows, ins[1].cols, ins[0].cols, out.dtype,
                                                     self.plan.num_sms, self.wgmma_ok):
            return self._sm90_case(op, ins[0], ins[1], out, x, o)
        if op.kind == "matmul" and skinny(ins[0].rows):
            return self._gemv_case(op, ins[0], ins[1], out, x, o)
        if op.kind == "matmul":
            a, b = ins[:2]
            bm, bn = matmul_block(a.rows, b.cols, self.plan.num_sms)
            vec = a.cols % 8 == 0 and b.cols % 8 == 0
            stages = matmul_stages(out.dtype, bm, bn)
            self.smem = max(self.smem, matmul_smem(out.dtype, bm, bn))
            self.asserts.append(f"static_assert(ark::matmul_smem<{ct}, {bm}, {bn}, {stages}>() == "
                                f"{matmul_smem(out.dtype, bm, bn)}, \"op {op.id}: codegen.py's matmul_smem\");")
            epi = self.epilogue(op, out, ins[2:])
            return (f"ark::matmul_tile<{ct}, {bm}, {bn}, {stages}, {'true' if vec else 'false'}>({x[0]}, {x[1]}, {o}, {a.rows}, "
                    f"{b.cols}, {a.cols}, {tile}, smem{epi});")
        if op.kind == "attention":
            seq, e = ins[0].shape[-2], ins[0].shape[-1]
            d = e // op.attr("heads")
            if d > MAX_HEAD_DIM:
                raise ModelError(f"attention (op {op.id}): head dimension {d} is above the kernel's {MAX_HEAD_DIM}; "
                                 "use more heads")
            bq = attention_block(seq, d, op.attr("heads") * (ins[0].rows // seq), self.plan.num_sms)
            smem = attention_smem(out.dtype, d, bq)
            self.smem = max(self.smem, smem)
            causal = "true" if op.attr("causal", True) else "false"
            base = f"const int base = r0 / {seq} * {seq};"  # the tile's (batch) first row; its queries from there
            if out.dtype == "fp32":  # the scalar tile
                self.asserts.append(f"static_assert(ark::attention_scalar_smem<{d}>() == {smem}, \"op {op.id}: "
                                    "codegen.py's attention_smem\");")
                return (f"{{ {base} ark::attention_tile_scalar<{ct}, {d}, {causal}>({x[0]}, {x[1]}, {x[2]}, {o}, {seq}, "
                        f"{e}, base, r0 - base, r1 - base, c0, smem); }}")
            self.asserts.append(f"static_assert(ark::attention_smem<{ct}, {d}, {bq}>() == {smem}, \"op {op.id}: "
                                "codegen.py's attention_smem\");")
            vec = "true" if d % 8 == 0 else "false"  # 16-byte pieces of each head's rows (E = heads x d)
            return (f"{{ {base} ark::attention_tile<{ct}, {d}, {bq}, {causal}, {vec}, {e}>({x[0]}, {x[1]}, {x[2]}, "
                    f"{o}, {seq}, base, r0 - base, r1 - base, c0, smem); }}")
        if op.kind == "rope":
            return (f"ark::rope_tile<{ct}>({x[0]}, {x[1]}, {x[2]}, {o}, {ins[0].shape[-2]}, {out.cols}, {tile});")
        if op.kind == "embedding":
            return (f"{{ const int bad = ark::embedding_rows<{ct}>({x[0]}, (const int*)T[{ins[1].id}], {o}, "
                    f"{op.attr('vocab')}, {out.cols}, r0, r1);\n"
                    f"      if (bad) return ((unsigned long long)ark::FAULT_BAD_INDEX << 32) | (unsigned)bad; }}")
        if op.kind == "copy":  # a tile's region is one contiguous byte range (tiling.py); a DMA tile is all of it
            e = DTYPE_BYTES[out.dtype]
            return (f"{{ const long long off = ((long long)r0 * {out.cols} + c0) * {e}, n = (long long)(r1 - r0) * (c1 - c0) * {e};\n"
                    f"      return ark::copy_tile(p, q, tile, op, (const char*)T[{ins[0].id}] + off, (char*)T[{out.id}] + off, n); }}")
        raise ModelError(f"op {op.id} ({op.kind}) has no op template")

    def _gemv_case(self, op: Op, a: Tensor, b: Tensor, out: Tensor, x: list[str], o: str) -> str:
        """A skinny matmul (tiling.skinny): its tiles own all of A's rows and skinny_cols columns of B."""
        epi = self.epilogue(op, out, [self.model.tensors[i] for i in op.inputs[2:]])
        return self._gemv_call(op, a.dtype, a.rows, b.cols, a.cols, skinny_cols(b.cols, self.plan.num_sms), x[0],
                               x[1], o, a.cols, b, epi)

    def _gemv_call(self, op: Op, dtype: str, m: int, n: int, k: int, w: int, pa: str, pb: str, po: str, lda: int,
                   b: Tensor, epi: str = "") -> str:
        """gemv.cuh's tile (gemv_mma.cuh's where tiling.skinny_mma) of `w` columns over K = k (A's rows lda apart),
        its shared memory asserted. Its rows are all of A's M: r0 % M is 0 (a split part's rows in the parts start at
        s * M). The tile takes the loop's `mode` where B is an input no op writes (its first slices then load before
        the tile's waits), else runs as one piece."""
        ct = CTYPE[dtype]
        e = 16 // DTYPE_BYTES[dtype]
        vec = k % e == 0 and n % e == 0 and lda % e == 0
        mode = "ark::TILE_RUN"
        if b.id not in self.written:
            self.early.add(op.id)
            mode = "mode"
        if vec and skinny_mma(m, n, k, dtype):
            gm = GemvMmaConfig.of(m, w)
            self.smem = max(self.smem, gm.smem())
            params = f"{ct}, {m}, {w}, {gm.stages}"
            self.asserts.append(f"static_assert(ark::gemv_mma_smem<{params}>() == {gm.smem()}, "
                                f"\"op {op.id}: codegen.py's GemvMmaConfig.smem\");")
            return (f"ark::gemv_mma_tile<{params}>({pa}, {pb}, {po}, {n}, {k}, {lda}, r0 % {m}, c0, c1, "
                    f"smem, {mode}{epi});")
        g = GemvConfig.of(dtype, m, w)
        smem = g.smem(dtype)
        self.smem = max(self.smem, smem)
        params = f"{ct}, {g.m}, {g.w}, {g.cpt}, {g.rpt}"
        self.asserts.append(f"static_assert(ark::gemv_smem<{params}, {g.stages}>() == {smem}, "
                            f"\"op {op.id}: codegen.py's GemvConfig.smem\");")
        return (f"ark::gemv_tile<{params}, {g.stages}, {'true' if vec else 'false'}>({pa}, {pb}, {po}, {n}, {k}, "
                f"{lda}, r0 % {m}, c0, c1, smem, {mode}{epi});")

    def _split_case(self, op: Op, a: Tensor, b: Tensor, out: Tensor, x: list[str], o: str) -> str:
        """One part of a split-K matmul (split_k.py): the tile's rows say which part (rows s * M .. of the fp32
        parts); the wgmma tile over the part's K, A's rows a whole K apart (or, for a skinny matmul, gemv.cuh's)."""
        ct = CTYPE[a.dtype]
        parts = op.attr("k_splits")
        m, n, k = a.rows, b.cols, a.cols
        kp = k // parts
        part = (f"const int s = r0 / {m}; const long long k0 = (long long)s * {kp};\n"
                f"      const {ct}* pa = {x[0]} + k0; const {ct}* pb = {x[1]} + k0 * {n}; "
                f"float* po = {o} + (long long)s * {m * n};")
        if sm90_matmul_block(m, n, kp, a.dtype, self.plan.num_sms, self.wgmma_ok) is None:  # a skinny part
            call = self._gemv_call(op, a.dtype, m, n, kp, SKINNY_PART_COLS, "pa", "pb", "po", k, b)
            return f"{{\n      {part}\n      {call}\n      }}"
        bm, bn = split_block(m, n, k, parts, a.dtype, self.plan.num_sms, self.wgmma_ok)
        stages, smem = sm90_stages(bm, bn, kp), matmul_sm90_smem(bm, bn, kp)
        self.wgmma = True
        self.smem = max(self.smem, smem)
        self.asserts.append(f"static_assert(ark::matmul_sm90_smem<{bm}, {bn}, {stages}>() == {smem}, "
                            f"\"op {op.id}: codegen.py's matmul_sm90_smem\");")
        if sm90_tma(parts * -(-m // bm) * -(-n // bn), self.plan.num_sms):
            call = (f"ark::matmul_tile_sm90_tma<{ct}, {bm}, {bn}, {stages}, float>({self.tensor_maps(op, a, b, bm)}, "
                    f"po, {m}, {n}, {kp}, (int)k0, r0 - s * {m}, r1 - s * {m}, c0, c1, smem);")
        else:
            call = (f"ark::matmul_tile_sm90<{ct}, {bm}, {bn}, {stages}, float>(pa, pb, po, {m}, {n}, {kp}, "
                    f"r0 - s * {m}, r1 - s * {m}, c0, c1, smem, {k});")
        return "\n".join([
            "{",
            f"      {part}",
            "#if ARK_HAS_WGMMA",
            f"      {call}",
            "#else",
            f"      ark::matmul_part_fma<{ct}>(pa, pb, po, {n}, {kp}, {k}, r0 - s * {m}, r1 - s * {m}, c0, c1);",
            "#endif",
            "      }"])

    def _sm90_case(self, op: Op, a: Tensor, b: Tensor, out: Tensor, x: list[str], o: str) -> str:
        """A bf16/fp16 matmul (tiling.sm90_matmul_block): the wgmma tile where the kernel is compiled for sm_90a,
        else the WMMA template on each 128-column part of the block (the same tiles)."""
        ct = CTYPE[out.dtype]
        bm, bn = sm90_matmul_block(a.rows, b.cols, a.cols, out.dtype, self.plan.num_sms, self.wgmma_ok)
        stages, smem = sm90_stages(bm, bn, a.cols), matmul_sm90_smem(bm, bn, a.cols)
        wbn = min(bn, 128)
        wstages, wsmem = matmul_stages(out.dtype, bm, wbn), matmul_smem(out.dtype, bm, wbn)
        self.wgmma = True
        self.smem = max(self.smem, smem, wsmem)
        self.asserts.append(f"static_assert(ark::matmul_sm90_smem<{bm}, {bn}, {stages}>() == {smem}, "
                            f"\"op {op.id}: codegen.py's matmul_sm90_smem\");")
        self.asserts.append(f"static_assert(ark::matmul_smem<{ct}, {bm}, {wbn}, {wstages}>() == {wsmem}, "
                            f"\"op {op.id}: codegen.py's matmul_smem\");")
        shape = f"{x[0]}, {x[1]}, {o}, {a.rows}, {b.cols}, {a.cols}"
        wmma = f"ark::matmul_tile<{ct}, {bm}, {wbn}, {wstages}, true>"
        epi = self.epilogue(op, out, [self.model.tensors[i] for i in op.inputs[2:]])
        if sm90_tma(-(-a.rows // bm) * -(-b.cols // bn), self.plan.num_sms):
            call = (f"ark::matmul_tile_sm90_tma<{ct}, {bm}, {bn}, {stages}>({self.tensor_maps(op, a, b, bm)}, {o}, "
                    f"{a.rows}, {b.cols}, {a.cols}, 0, r0, r1, c0, c1, smem{epi});")
        else:
            call = (f"ark::matmul_tile_sm90<{ct}, {bm}, {bn}, {stages}>({shape}, r0, r1, c0, c1, smem"
                    f"{', 0' + epi if epi else ''});")
        return "\n".join([
            "#if ARK_HAS_WGMMA",
            f"      {call}",
            "#else",
            f"      for (int h = c0; h < c1; h += {wbn}) {{  // a loop, not two calls: one inlined copy's registers",
            "        if (h > c0) __syncthreads();  // the first part's warps are done with the shared memory",
            f"        {wmma}({shape}, r0, r1, h, c1 < h + {wbn} ? c1 : h + {wbn}, smem{epi});",
            "      }",
            "#endif"])




def _arch_lines(wgmma: bool) -> list[str]:
    """The kernel's min-blocks per SM: 2 (128 registers a thread), or 1 where the wgmma tile runs (its 128 x 256
    block keeps 128 fp32 sums a thread; the loop kernel has one CTA per SM anyway); and with the wgmma tile, the
    mark that has driver/gpu/compile.py build for sm_90a on a compute capability 9.0 GPU."""
    if not wgmma:
        return ["#define ARK_MIN_BLOCKS 2"]
    return [SM90_ARCH_MARK, "#if ARK_HAS_WGMMA", "#define ARK_MIN_BLOCKS 1", "#else", "#define ARK_MIN_BLOCKS 2",
            "#endif"]


MAX_IO_TABLE = 8192  # ints of the ops' tensor-id table in constant memory (32 KiB); past it, ids are literals


def _named_by_content(structs: list[str]) -> tuple[list[str], dict[str, str]]:
    """The structs, each renamed after a digest of its text and kept once, and the old name -> new name map:
    ops that do the same thing get the same struct, so their cases can be one."""
    renamed: dict[str, str] = {}
    out: list[str] = []
    for text in structs:
        for old, new in renamed.items():
            text = re.sub(rf"\b{old}\b", new, text)
        name = re.match(r"struct (\w+) ", text).group(1)
        digest = hashlib.sha256(re.sub(rf"\b{name}\b", "@", text).encode()).hexdigest()[:10]
        renamed[name] = new = f"{name.rstrip('0123456789In')}_{digest}"
        text = re.sub(rf"\b{name}\b", new, text)
        if text not in out:
            out.append(text)
    return out, renamed


def _cases(model: Model, bodies: list[str], renamed: dict[str, str]) -> tuple[list[str], list[str], list[int]]:
    """One `case` per distinct op body, the ops that share it listed above it, with their tensors read from the
    table OP_IO (`io`); that table's declaration; and per op, its case (the run instruction carries it, so the
    switch has a case per body, not per op: tasks1000's 1,000 ops are one case, with no jump table in constant
    memory to read before each tile). A model that repeats a layer compiles each op body once: a smaller kernel,
    and its tiles' code stays in the instruction cache. Past MAX_IO_TABLE, one case per op."""
    norm: dict[str, list[tuple[int, list[int]]]] = {}
    for op, body in zip(model.ops, bodies):
        for old, new in renamed.items():
            body = re.sub(rf"\b{old}\b", new, body)
        ids: list[int] = []

        def slot(m: re.Match) -> str:
            tid = int(m.group(1))
            if tid not in ids:
                ids.append(tid)
            return f"T[io[{ids.index(tid)}]]"

        norm.setdefault(re.sub(r"T\[(\d+)\]", slot, body), []).append((op.id, ids))
    width = max((len(ids) for group in norm.values() for _, ids in group), default=0) or 1
    table = len(model.ops) * width <= MAX_IO_TABLE
    cases: list[str] = []
    op_case = [0] * len(model.ops)
    for body, group in norm.items():
        heads = []
        for op_id, ids in group:
            op = model.ops[op_id]
            ins = ", ".join(f"{model.tensors[i].name}{list(model.tensors[i].shape)}" for i in op.inputs)
            out = model.tensors[op.output]
            heads.append(f"op {op.id}: {op.kind} {op.fn}({ins}) -> {out.name}{list(out.shape)} {out.dtype}")
            if not table:
                op_case[op_id] = op_id
                literal = re.sub(r"io\[(\d+)\]", lambda m, ids=ids: str(ids[int(m.group(1))]), body)
                cases.append(f"    case {op_id}:  // {heads.pop()}\n    {{\n      {literal}\n      return 0ull;\n    }}")
        if table:
            for op_id, _ in group:
                op_case[op_id] = len(cases)
            listed = "".join(f"    // {h}\n" for h in heads)
            cases.append(f"{listed}    case {len(cases)}:\n    {{\n      {body}\n      return 0ull;\n    }}")
    if not table:
        return cases, [], op_case
    rows = ", ".join("{" + ", ".join(str(i) for i in ids + [0] * (width - len(ids))) + "}"
                     for _, (_, ids) in sorted((op, (op, ids)) for group in norm.values() for op, ids in group))
    return cases, [f"__constant__ int OP_IO[{len(model.ops)}][{width}] = {{{rows}}};  // per op: its tensors' ids",
                   "/* Op `op`'s row of OP_IO loaded now, into the SM's constant cache: called while the CTA waits to "
                   "run the op. */",
                   "__device__ __forceinline__ void prefetch_op(int op) {",
                   f"  asm volatile(\"\" ::\"r\"(OP_IO[op][0]), \"r\"(OP_IO[op][{width - 1}]));",
                   "}"], op_case


def generate(model: Model, plan: Plan, graph_copies: bool = False) -> KernelSource:
    """The model's loop kernel; ModelError for an op the templates cannot run. `graph_copies`: some copy ops take
    the device-graph path (the kernel then launches graphs, and runs inside one)."""
    g = _Gen(model, plan)
    bodies = [g.case(op) for op in model.ops]
    structs, renamed = _named_by_content(g.structs)
    cases, io_table, op_case = _cases(model, bodies, renamed)
    early = {op_case[i] for i in g.early}
    # the same bodies with `mode` TILE_PRELOAD: each weight-streaming tile issues its first weight copies, returns
    preload_cases = [re.sub(r"return 0ull;\n    \}$", "return true;\n    }", c) for c in cases
                     if int(re.search(r"case (\d+):", c).group(1)) in early]
    smem = max(g.smem, 16)
    head = [f"// The loop kernel of model {model.name!r}: {len(model.ops)} ops, {len(plan.tiles)} tiles, "
            f"{plan.num_sms} SMs (generated by ark_runtime/kernel/codegen.py; op templates in include/ark/).",
            f"// ark headers {headers_digest()}",
            f"#define ARK_GRAPH_COPIES {int(graph_copies)}",
            *(f"#include <ark/{h}>" for h in HEADERS),
            f"#define THREADS {THREADS}",
            *_arch_lines(g.wgmma),
            *layout_checks(),
            "static_assert(ark::GEMV_THREADS == THREADS, \"gemv.cuh\");",
            "namespace gen {",
            f"constexpr int SMEM_BYTES = {smem};  // dynamic shared memory at launch",
            f"constexpr int NUM_TENSORS = {len(model.tensors)};",
            f"constexpr int NUM_OPS = {len(model.ops)};",
            f"constexpr int TENSOR_MAPS_AT = {tensor_maps_at(len(model.tensors))};  // words into p.tensors",
            f"#define ARK_TENSORS_SHARED {int(len(model.tensors) <= MAX_SHARED_TENSORS)}  // addresses in shared memory",
            "static_assert(SMEM_BYTES > 0, \"\");",
            *structs, *g.asserts,
            *(io_table or ["__device__ __forceinline__ void prefetch_op(int) {}  // ids are literals: nothing to load"]),
            "",
            "/* Where case `body` streams weights that an input holds, issues the copies of tile `tile`'s first slices",
            " * (gemv.cuh's TILE_PRELOAD) and is true: called before the tile's waits, then run_tile with",
            " * ark::TILE_PRELOADED. */",
            "__device__ __forceinline__ bool preload_tile(const ark::Program& p, void* const* T, int tile, int op,",
            "                                             int body, int r0, int r1, int c0, int c1,",
            "                                             unsigned char* smem) {",
            *(["  const int mode = ark::TILE_PRELOAD;"] if preload_cases else []),
            *(["  const int* io = OP_IO[op];"] if io_table and preload_cases else []),
            *(["  switch (body) {", *preload_cases, "  }"] if preload_cases else []),
            "  return false;",
            "}",
            "",
            "/* Runs tile `tile` of op `op` (whose body is case `body`) on every thread of the CTA; non-zero (fault",
            " * code << 32 | detail) when the tile found bad input. `mode`: gemv.cuh's TileMode. */",
            "__device__ __forceinline__ unsigned long long run_tile(const ark::Program& p, const arkdma_queue& q,",
            "                                                       void* const* T, int tile, int op, int body, int r0,",
            "                                                       int r1, int c0, int c1, unsigned char* smem,",
            "                                                       int mode) {",
            *(["  const int* io = OP_IO[op];"] if io_table else []),
            "  switch (body) {",
            *cases,
            "  }",
            "  return 0ull;",
            "}",
            "}  // namespace gen"]
    # copy_tile is declared after run_tile uses it: declare it first
    proto = ("namespace ark { struct Program; __device__ __forceinline__ unsigned long long copy_tile(const Program&, "
             "const arkdma_queue&, int, int, const void*, void*, unsigned long long); }")
    text = "\n".join(head[:3 + len(HEADERS)] + [proto] + head[3 + len(HEADERS):]) + "\n#include <ark/loop_kernel.cuh>\n"
    return KernelSource(text, smem, graph_copies=graph_copies, tensor_maps=tuple(g.maps), op_cases=tuple(op_case))
