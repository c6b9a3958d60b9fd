"""The loop kernel of one model as readable CUDA C++: a `case` per distinct op (ops that do the same thing on other
tensors share one) calling its op template (include/ark/*.cuh), as each op's spec writes it (ark_runtime/ops/) from
the variant the plan holds, then the resident loop (include/ark/loop_kernel.cuh) that plays the plan's streams.
Addresses, region ids and the plan's arrays are data (`Program`), so one model compiles once whatever memory it
runs on; the source's hash keys the compile cache."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from driver.gpu.tensor_maps import TENSOR_MAP_BYTES
from ark_runtime.graph import DTYPE_BYTES, Op, Tensor
from ark_runtime.kernel.records import layout_checks
from ark_runtime.model import Model
from ark_runtime.ops import spec
from ark_runtime.ops.fused import step_call
from ark_runtime.plan import Plan

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
CORE_HEADERS = ("numeric.cuh", "elementwise.cuh", "rows.cuh", "matmul.cuh", "matmul_sm90.cuh", "gemv.cuh",
                "gemv_mma.cuh", "attention.cuh", "copy.cuh", "loop.cuh")
LOOP_HEADER = "loop_kernel.cuh"  # included last, after namespace gen
# every op template: the core ones in order, then any other header of the folder (a new op's), by name
HEADERS = (*CORE_HEADERS, *sorted(p.name for p in (INCLUDE_DIR / "ark").glob("*.cuh")
                                  if p.name not in CORE_HEADERS and p.name != LOOP_HEADER))
DIGESTED = (*HEADERS, "codes.h", LOOP_HEADER)  # every file a kernel's text includes: their digest keys the cache
CTYPE = {"fp32": "float", "fp16": "__half", "bf16": "__nv_bfloat16", "int32": "int"}
THREADS = 256
MAX_SHARED_TENSORS = 2048  # tensor addresses the kernel keeps in shared memory (16 KiB); more are read from global
MAPS_PER_OP = 2  # tensor maps per op after the tensor addresses: A's at 2 op, B's at 2 op + 1
SM90_ARCH_MARK = "#define ARKDMA_ARCH_SPECIFIC 1"  # driver/gpu/compile.py: compile for sm_90a on an H100


def tensor_maps_at(num_tensors: int, world: int = 1) -> int:
    """Where the tensor maps start in Program.tensors, in 8-byte words: after the addresses (and in a World's kernel
    the ranks' counter arrays, `world` words from word num_tensors: peers_at), 64-byte aligned. (Not a Program field
    of their own: one more pointer made that struct 128 bytes and mlp-b8 and mlp-b64 5-7% slower on the H200, with
    the kernels otherwise the same.)"""
    words = num_tensors + (world if world > 1 else 0)
    return -(-words // 8) * 8


def peers_at(num_tensors: int) -> int:
    """Where a World's kernel finds each rank's counter array (as this rank maps it) in Program.tensors: word
    num_tensors + rank."""
    return num_tensors


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


class Emitter:
    """What an op spec's `emit` writes through: the tensors' C++ types and addresses, the structs (broadcast maps,
    fused functors) and static_asserts the kernel declares before run_tile, the shared memory the kernel needs, and
    the tensor maps the host must encode."""

    def __init__(self, model: Model, plan: Plan):
        self.model, self.plan = model, plan
        self.num_sms = plan.num_sms
        self.structs: list[str] = []
        self.asserts: list[str] = []
        self.smem = 0
        self.wgmma = False  # a matmul uses matmul_sm90.cuh (then one CTA per SM: ARK_MIN_BLOCKS 1 on sm_90a)
        self.maps: list[TensorMapSpec] = []
        self.early: set[int] = set()  # ops whose tiles load their first weight slices before their waits

    def tensor(self, tid: int) -> Tensor:
        return self.model.tensors[tid]

    @staticmethod
    def ctype(t: Tensor) -> str:
        return CTYPE[t.dtype]

    @staticmethod
    def ctype_of(dtype: str) -> str:
        return CTYPE[dtype]

    @staticmethod
    def esize(t: Tensor) -> int:
        return DTYPE_BYTES[t.dtype]

    def ptr(self, tid: int, const: bool = True) -> str:
        t = self.model.tensors[tid]
        return f"({'const ' if const else ''}{CTYPE[t.dtype]}*)T[{tid}]"

    def need_smem(self, nbytes: int, check: str | None = None) -> None:
        """The kernel's dynamic shared memory covers `nbytes`; `check`, a static_assert that the template's own
        formula gives the same."""
        self.smem = max(self.smem, nbytes)
        if check is not None and check not in self.asserts:
            self.asserts.append(check)

    def broadcast_map(self, name: str, t: Tensor, out: Tensor) -> str | None:
        """The name of a struct mapping the output's flat index to `t`'s (declared once), or None when the shapes
        agree. Its text holds shapes only, so ops that broadcast alike share it (and their case)."""
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
        self.structs.append(f"struct {name} {{  // {list(t.shape)} broadcast to {list(out.shape)}\n"
                            f"  static __device__ __forceinline__ long long at(long long f) {{ return {body}; }}\n}};")
        return name

    def epilogue(self, op: Op, out: Tensor, extras: list[Tensor]) -> str:
        """The trailing argument `, Epi<id>{...}` for an op with elementwise ops fused into its stores (fusion.py:
        operand ("in", 0) is the op's own result, ("in", j) its extra input j - 1), or nothing."""
        steps = op.attr("epilogue")
        if not steps:
            return ""
        name = f"Epi{op.id}"
        members, loads, args = [], [], []
        for j, t in enumerate(extras, start=1):
            m = self.broadcast_map(f"{name}In{j}", t, out)
            members.append(f"  const {CTYPE[t.dtype]}* in{j};")
            loads.append(f"    const float a{j} = ark::ld(in{j}, {f'{m}::at(f)' if m else 'f'});")
            args.append(self.ptr(t.id))
        body = [f"    const float s{k} = {step_call(fn, refs, '')};  // {fn}" for k, (fn, *refs) in enumerate(steps)]
        self.structs.append(f"struct {name} {{  // {len(steps)} elementwise ops fused into the op's stores\n"
                            + "".join(m + "\n" for m in members)
                            + "  __device__ __forceinline__ float operator()(float a0, long long f) const {\n"
                            + "".join(line + "\n" for line in loads + body)
                            + f"    return s{len(steps) - 1};\n  }}\n}};")
        return f", {name}{{{', '.join(args)}}}"

    def tensor_maps(self, op: Op, a: Tensor, b: Tensor, bm: int, bk: int) -> str:
        """The arguments naming op's tensor maps of A (box bk x bm) and B (box bk x 64), which the host makes."""
        first = MAPS_PER_OP * op.id
        self.maps += [TensorMapSpec(first, a.id, a.rows, a.cols, bm, bk),
                      TensorMapSpec(first + 1, b.id, b.rows, b.cols, bk, 64)]
        maps = f"(const unsigned char*)(p.tensors + TENSOR_MAPS_AT) + {MAPS_PER_OP * TENSOR_MAP_BYTES} * op"
        return f"{maps}, {maps} + {TENSOR_MAP_BYTES}"


def _arch_lines(wgmma: bool) -> list[str]:
    """The kernel's min-blocks per SM: 2 (128 registers a thread), or 1 where the wgmma tile runs (its 128 x 256
    block keeps 128 fp32 sums a thread; the loop kernel has one CTA per SM anyway); and with the wgmma tile, the
    mark that has driver/gpu/compile.py build for sm_90a on a compute capability 9.0 GPU."""
    if not wgmma:
        return ["#define ARK_MIN_BLOCKS 2"]
    return [SM90_ARCH_MARK, "#if ARK_HAS_WGMMA", "#define ARK_MIN_BLOCKS 1", "#else", "#define ARK_MIN_BLOCKS 2",
            "#endif"]


MAX_IO_TABLE = 8192  # ints of the ops' tensor-id table in constant memory (32 KiB); past it, ids are literals


STRUCT_NAME = re.compile(r"\b(?:Op|Fused|Epi)\d+(?:In\d+)?\b")  # the names Emitter's structs are declared with


def _rename(text: str, renamed: dict[str, str]) -> str:
    return STRUCT_NAME.sub(lambda m: renamed.get(m.group(0), m.group(0)), text)


def _named_by_content(structs: list[str]) -> tuple[list[str], dict[str, str]]:
    """The structs, each renamed after a digest of its text and kept once, and the old name -> new name map:
    ops that do the same thing get the same struct, so their cases can be one. (A struct names only structs declared
    before it, already renamed when it is read.)"""
    renamed: dict[str, str] = {}
    out: list[str] = []
    seen: set[str] = set()
    for text in structs:
        name = re.match(r"struct (\w+) ", text).group(1)
        text = _rename(text, renamed)
        digest = hashlib.sha256(re.sub(rf"\b{name}\b", "@", text).encode()).hexdigest()[:10]
        renamed[name] = new = f"{name.rstrip('0123456789In')}_{digest}"
        text = re.sub(rf"\b{name}\b", new, text)
        if text not in seen:
            seen.add(text)
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
        body = _rename(body, renamed)
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


def generate(model: Model, plan: Plan, graph_copies: bool = False, rank_ops: frozenset[int] | None = None,
             world: int = 1) -> KernelSource:
    """The model's loop kernel; ModelError for an op the templates cannot run. `graph_copies`: some copy ops take
    the device-graph path (the kernel then launches graphs, and runs inside one). A World's rank (world_plan.py):
    `model` and `plan` are the World's, `rank_ops` the ops this rank runs (the others' case is empty), and
    `world` its ranks (signals reach other ranks' counters; waits acquire at system scope)."""
    g = Emitter(model, plan)
    bodies = [spec(op.kind).emit(g, op, plan.variants[op.id]) if rank_ops is None or op.id in rank_ops
              else "// run by another rank" for op in model.ops]
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
            *([f"#define ARK_WORLD {world}  // ranks of a World: their counters in p.tensors from gen::PEERS_AT"]
              if world > 1 else []),
            *(f"#include <ark/{h}>" for h in HEADERS),
            f"#define THREADS {THREADS}",
            *_arch_lines(g.wgmma),
            *layout_checks(),
            "static_assert(ark::GEMV_THREADS == THREADS, \"gemv.cuh\");",
            "namespace gen {",
            f"constexpr int SMEM_BYTES = {smem};  // dynamic shared memory at launch",
            f"constexpr int NUM_TENSORS = {len(model.tensors)};",
            f"constexpr int NUM_OPS = {len(model.ops)};",
            f"constexpr int TENSOR_MAPS_AT = {tensor_maps_at(len(model.tensors), world)};  // words into p.tensors",
            *([f"constexpr int PEERS_AT = {peers_at(len(model.tensors))};  // words into p.tensors: each rank's "
               "counters"] if world > 1 else []),
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
    cut = head.index(f"#include <ark/{HEADERS[-1]}>") + 1
    text = "\n".join(head[:cut] + [proto] + head[cut:]) + "\n#include <ark/loop_kernel.cuh>\n"
    return KernelSource(text, smem, graph_copies=graph_copies, tensor_maps=tuple(g.maps), op_cases=tuple(op_case))
