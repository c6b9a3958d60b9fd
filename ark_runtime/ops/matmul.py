"""Matrix multiply a [..., M, K] @ b [K, N] -> [..., M, N] with fp32 accumulation, and the parts of one whose K was
cut by split_k.py (attribute `k_splits`: part s writes its fp32 sums to rows s * M .. of the parts tensor). A chain
of elementwise ops after it may run in its stores (attribute `epilogue`, fusion.py).

Its variant is one of four templates, chosen once here and written into the plan:
  matmul_sm90   Hopper wgmma (matmul_sm90.cuh), bf16/fp16 with K and N multiples of 8, blocks of SM90_BLOCKS,
                loading by TMA or cp.async (`loader`, measured.py's table "matmul_sm90.loader"); where the kernel
                is not built for sm_90a the WMMA template runs the same tiles (`fallback`)
  gemv_mma      skinny matmuls (M <= SKINNY_ROWS) on tensor cores, operands swapped (gemv_mma.cuh)
  gemv          skinny matmuls on FMA units (gemv.cuh); which of the two by measured.py's table "skinny.tile"
  matmul_wmma   every other matmul (matmul.cuh), blocks halved until they fill the SMs
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ark_runtime.graph import DTYPE_BYTES, ModelError, Op, Tensor
from ark_runtime.ops import fused
from ark_runtime.ops.blocks import read_like
from ark_runtime.ops.spec import Built, OpSpec, arity, no_attrs, require_float, same_dtype
from ark_runtime.tiling import OFF, Region, chunks, count, switched_off

THREADS = 256  # the loop kernel's CTA
BK, WARPS = 32, 8  # matmul.cuh
PAD = 8  # matmul.cuh: shared-memory rows padded by this many elements
STAGE_BUDGET = 96 * 1024  # shared memory for a matmul's slices in flight

MATMUL_TILE = 128
MIN_MATMUL_TILE = 32
SKINNY_ROWS = 16  # a matmul with at most this many rows streams its weights (gemv.cuh, gemv_mma.cuh), see `skinny`
SKINNY_WIDTHS = (128, 64, 32)  # its tiles' columns, widest first; 32 at least: rows of B read 64 bytes or more
# The weight-streaming tiles' slices in flight at most (measured.py: "gemv.stages").
WEIGHT_STAGES = 4
SM90_ENV = "ARK_SM90_MATMUL"  # "0" (or "off", "no", "false"): never the Hopper wgmma tile
SM90_TMA_ENV = "ARK_SM90_TMA"  # "auto" (default: the measured rule), "1" every wgmma tile loads by TMA, "0" none does
# matmul_sm90.cuh's blocks (BM x BN), largest first; of equal areas the taller first (B, the weights, is then read
# by fewer block rows). BM 128: a warpgroup per 64 rows; BM 64: the warpgroups split each slice's K.
SM90_BLOCKS = ((128, 256), (128, 128), (64, 256), (128, 64), (64, 128), (64, 64))
SM90_FILL = Fraction(7, 8)  # "fills the SMs": at least this many tiles per SM (128 tiles on 132 SMs do)
SM90_BK = 64  # matmul_sm90.cuh: K per slice
SM90_RING = 192 * 1024  # its ring of slices at most: with 1 KiB of alignment and the loop kernel's own static
#                         shared memory (2 KiB, and 16 KiB at most of tensor addresses) under the SM's 227 KiB
K_SPLITS = (8, 4, 2)  # parts a matmul's K may be cut into (split_k.py), most first
# K of one part at least (measured.py: "split_k.min_part_k"): the sum is one more dependency level, so a split pays
# only where a part saves more than that.
MIN_PART_K = 1024
# A skinny matmul's widest tiles (gemv.cuh, gemv_mma.cuh): a split part takes these; narrower tiles read shorter
# pieces of each row of B and stream slower (bench/results/h100/experiments/sm_spread/).
SKINNY_PART_COLS = SKINNY_WIDTHS[0]
GEMV_SUMS = 64  # gemv.cuh: a thread's fp32 sums (rows x its columns) at most, so two CTAs' registers fit an SM
GEMV_THREAD_SLICE = 64  # bytes of B a thread copies per slice: 16 KiB a slice
GEMV_MMA_SLICE = 16 * 1024  # gemv_mma.cuh: bytes of B per slice
MAPS_PER_OP = 2  # tensor maps per op after the tensor addresses: A's at 2 op, B's at 2 op + 1


# --- which template, which block -------------------------------------------------------------------------------
def matmul_block(m: int, n: int, num_sms: int) -> tuple[int, int]:
    """The output block of a matmul tile: 128 x 128 where there are enough of them to fill the SMs, else
    halved (to 32 at the least) until there are; M below 128 gives one block row of the next power of two."""
    bm = MATMUL_TILE if m >= MATMUL_TILE else max(16, 1 << (m - 1).bit_length())
    bn = MATMUL_TILE
    while -(-m // bm) * -(-n // bn) < num_sms and (bn > MIN_MATMUL_TILE or bm > MIN_MATMUL_TILE):
        if bn >= bm and bn > MIN_MATMUL_TILE:
            bn //= 2
        else:
            bm //= 2
    return bm, bn


def skinny(m: int) -> bool:
    """Whether a matmul of `m` rows takes a weight-streaming tile (gemv.cuh on FMA units, or gemv_mma.cuh on tensor
    cores) instead of a tile whose 64-row (wgmma) or 16-row (WMMA) blocks would be mostly padding."""
    return m <= SKINNY_ROWS


def skinny_class(m: int) -> str:
    """A skinny matmul's shape class in measured.py's table "skinny.tile"."""
    return "1-4 rows" if m <= 4 else "5-16 rows"


def skinny_mma(m: int, n: int, k: int, dtype: str, device: str | None = None) -> bool:
    """Whether a skinny matmul takes gemv_mma.cuh (tensor cores, 16-byte copies) rather than gemv.cuh's FMA tile: where
    it can (bf16/fp16, K and N multiples of 8) and was measured faster for its rows (measured.py, "skinny.tile")."""
    from ark_runtime.ops.measured import decide

    return (m <= SKINNY_ROWS and dtype in ("bf16", "fp16") and k % 8 == 0 and n % 8 == 0
            and decide("skinny.tile", skinny_class(m), device, ("gemv", "gemv_mma")) == "gemv_mma")


def skinny_cols(n: int, num_sms: int) -> int:
    """The columns of a skinny matmul's tile, which owns them for all rows and all of K (unless k_splits cuts K
    where this is narrower than SKINNY_PART_COLS). Of SKINNY_WIDTHS, the one whose tiles fill the SMs' waves best
    (tiles / (waves x SMs)), the widest of equals, as fewer tiles cost fewer fills of the pipeline and reductions:
    N = 16384 on 132 SMs gives 128 tiles of 128 columns, N = 4096 128 tiles of 32."""
    def fill(w: int) -> Fraction:
        tiles = -(-n // w)
        return Fraction(tiles, -(-tiles // num_sms) * num_sms)
    return max(SKINNY_WIDTHS, key=fill)


def sm90_enabled() -> bool:
    return not switched_off(SM90_ENV)


def sm90_matmul_block(m: int, n: int, k: int, dtype: str, num_sms: int, wgmma: bool = True) -> tuple[int, int] | None:
    """The output block (BM, BN) of the Hopper wgmma tile for a bf16/fp16 matmul, or None where another tile runs:
    the skinny tiles, the WMMA tile for fp32, for K or N not a multiple of 8 (the tile loads 16-byte rows) and with
    $ARK_SM90_MATMUL=0. Of SM90_BLOCKS (largest first), leaving out blocks that the matrix would leave more than
    half empty (128 rows for M <= 64, 256 columns for N <= 128, 128 for N <= 64), the first whose tiles fill the
    SMs (SM90_FILL per SM), else the smallest, 64 x 64."""
    if not wgmma or not sm90_enabled() or dtype not in ("bf16", "fp16") or k % 8 or n % 8 or k < 8 or n < 8 \
            or skinny(m):
        return None
    blocks = [(bm, bn) for bm, bn in SM90_BLOCKS if (bm == 64 or 2 * m > bm) and (bn == 64 or 2 * n > bn)]
    for bm, bn in blocks:
        if -(-m // bm) * -(-n // bn) >= SM90_FILL * num_sms:
            return bm, bn
    return blocks[-1]


def _parts(tiles: int, k: int, num_sms: int, least: int = 2) -> int:
    if 2 * tiles > num_sms:
        return 1
    for s in K_SPLITS:
        if s >= least and tiles * s <= num_sms and k % (s * SM90_BK) == 0 and k // s >= MIN_PART_K:
            return s
    return 1


def split_plan(m: int, n: int, k: int, dtype: str, num_sms: int, wgmma: bool = True) -> tuple[int, tuple[int, int]]:
    """(parts to cut a matmul's K into, the output block of a part's tiles); 1 part: no split.
    Where the wgmma tile runs and its tiles fill at most half the SMs, or where a skinny matmul would take tiles
    narrower than SKINNY_PART_COLS: then the most parts whose tiles (SKINNY_PART_COLS wide for a skinny one, and
    then enough parts that a tile reads no more of B than the narrow tile would) still fit on the SMs at once, each
    a whole number of 64-wide slices and at least MIN_PART_K long."""
    block = sm90_matmul_block(m, n, k, dtype, num_sms, wgmma)
    if block is None:
        width = skinny_cols(n, num_sms)
        if not skinny(m) or width >= SKINNY_PART_COLS:
            return 1, (m, width)
        part = (m, SKINNY_PART_COLS)
        least = -(-min(n, SKINNY_PART_COLS) // width)  # a part's tile reads no more of B than the unsplit tile
        return _parts(-(-n // SKINNY_PART_COLS), k, num_sms, least), part
    return _parts(-(-m // block[0]) * -(-n // block[1]), k, num_sms), block


def k_splits(m: int, n: int, k: int, dtype: str, num_sms: int, wgmma: bool = True) -> int:
    """Parts to cut a matmul's K into (1: none); see split_plan."""
    return split_plan(m, n, k, dtype, num_sms, wgmma)[0]


def split_block(m: int, n: int, k: int, parts: int, dtype: str, num_sms: int, wgmma: bool = True) -> tuple[int, int]:
    """The output block of the tiles of a matmul's K cut into `parts` (K // parts each): split_plan's where it cuts
    that many, else the wgmma tile's for the part's K, or a skinny matmul's SKINNY_PART_COLS columns."""
    chosen, block = split_plan(m, n, k, dtype, num_sms, wgmma)
    if chosen == parts:
        return block
    return sm90_matmul_block(m, n, k // parts, dtype, num_sms, wgmma) or (m, SKINNY_PART_COLS)


def block_order(m: int, n: int, bm: int, bn: int, num_sms: int) -> list[tuple[int, int, int, int]]:
    """A matmul's output blocks (r0, r1, c0, c1) in the order the schedule deals them to SMs: down a band of `g` block
    rows, then the next column, band after band. The SMs then work at once on about g block rows and num_sms / g
    block columns, and g = sqrt(num_sms * bn / bm) makes the A rows and B columns they read about equal in bytes,
    which keeps each wave's inputs in L2 (bench/results/h200/experiments/tma_raster)."""
    rows, cols = chunks(m, bm), chunks(n, bn)
    count(len(rows) * len(cols))
    g = min(len(rows), max(1, round(math.sqrt(num_sms * bn / bm))))
    return [(r0, r1, c0, c1) for band in range(0, len(rows), g) for c0, c1 in cols for r0, r1 in rows[band:band + g]]


def sm90_tma(tiles: int, num_sms: int) -> bool:
    """Whether a matmul of `tiles` wgmma tiles loads them by TMA rather than by cp.async: $ARK_SM90_TMA forces
    either; else the loader measured faster for its class (measured.py, "matmul_sm90.loader": TMA where the tiles
    take more than one wave, cp.async where they all run at once)."""
    from ark_runtime.ops.measured import decide

    how = os.environ.get(SM90_TMA_ENV, "auto").strip().lower()
    if how in OFF:
        return False
    if how in ("1", "on", "yes", "true"):
        return True
    return decide("matmul_sm90.loader", "waves" if tiles > num_sms else "one wave") == "tma"


# --- shared memory, as the templates compute it (each checked by a static_assert in the kernel) ------------------
def matmul_stages(dtype: str, bm: int, bn: int) -> int:
    """matmul.cuh's slices in flight: as many as fit the budget, 2 to 8 (small tiles, as at batch 1, need the most)."""
    slice_bytes = (bm * (BK + PAD) + BK * (bn + PAD)) * DTYPE_BYTES[dtype]
    return max(2, min(8, STAGE_BUDGET // slice_bytes))


def matmul_smem(dtype: str, bm: int, bn: int) -> int:
    stages = matmul_stages(dtype, bm, bn)
    return stages * (bm * (BK + PAD) + BK * (bn + PAD)) * DTYPE_BYTES[dtype] + \
        (WARPS * 256 * 4 if dtype != "fp32" else 0)


def sm90_stage_bytes(bm: int, bn: int) -> int:
    """A slice of matmul_sm90.cuh's ring: A bm x 64 and B 64 x bn, 2-byte elements."""
    return (bm + bn) * SM90_BK * 2


def sm90_stages(bm: int, bn: int, k: int) -> int:
    """Slices in matmul_sm90.cuh's ring: as many as SM90_RING holds, but no more than K has slices plus the two the
    pipeline multiplies and queues; 3 at the least."""
    return max(3, min(SM90_RING // sm90_stage_bytes(bm, bn), -(-k // SM90_BK) + 2))


def matmul_sm90_smem(bm: int, bn: int, k: int) -> int:
    """As matmul_sm90.cuh's matmul_sm90_smem: the ring and 1 KiB to align it to the 128-byte swizzle's pattern."""
    return sm90_stages(bm, bn, k) * sm90_stage_bytes(bm, bn) + 1024


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


@dataclass(frozen=True)
class GemvMmaConfig:
    """gemv_mma.cuh's constants for a skinny bf16/fp16 matmul of `m` rows in tiles of `w` columns: a slice is 16 KiB
    of B and A's m rows (padded to 8 or 16) over the same K."""

    m: int
    w: int
    stages: int  # slices in flight

    @staticmethod
    def of(m: int, w: int) -> GemvMmaConfig:
        if w not in (32, 64, 128):  # SKINNY_WIDTHS: A's rows 128 bytes a slice or more, 16-column blocks
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


# --- the variant ---------------------------------------------------------------------------------------------------
def _weights(model, m: int, n: int, k: int, lda: int, w: int, dtype: str, b: Tensor, device: str,
             tile: str | None = None) -> dict:
    """A weight-streaming tile of `w` columns over K = k (A's rows lda apart): gemv_mma or gemv (`tile`, else the
    measured choice), with its constants. `preload`: B is an input no op writes, so the tile's first slices may load
    before the tile's waits."""
    e = 16 // DTYPE_BYTES[dtype]
    vec = k % e == 0 and n % e == 0 and lda % e == 0
    preload = all(op.output != b.id for op in model.ops)
    mma = skinny_mma(m, n, k, dtype, device) if tile is None else tile == "gemv_mma"
    if vec and mma:
        gm = GemvMmaConfig.of(m, w)
        return {"template": "gemv_mma", "block": [m, w], "stages": gm.stages, "smem": gm.smem(), "preload": preload}
    g = GemvConfig.of(dtype, m, w)
    return {"template": "gemv", "block": [m, w], "cpt": g.cpt, "rpt": g.rpt, "stages": g.stages, "vec": vec,
            "smem": g.smem(dtype), "preload": preload}


def _sm90(bm: int, bn: int, k: int, tiles: int, num_sms: int, loader: str | None = None) -> dict:
    if loader is None:
        loader = "tma" if sm90_tma(tiles, num_sms) else "cp.async"
    return {"template": "matmul_sm90", "block": [bm, bn], "stages": sm90_stages(bm, bn, k),
            "smem": matmul_sm90_smem(bm, bn, k), "loader": loader}


def sm90_epilogue(bn: int) -> str:
    """How the wgmma tile runs an epilogue fused into it (matmul_sm90.cuh's finish): "unrolled", each sum through the
    epilogue where the wgmma left it, or "staged", the block through the ring and a rolled loop. The one measured
    faster for the block's width (measured.py, "matmul_sm90.epilogue")."""
    from ark_runtime.ops.measured import decide

    return decide("matmul_sm90.epilogue", "256 columns" if bn == 256 else "64-128 columns")


def sm90_blocks_for(m: int, n: int) -> tuple[tuple[int, int], ...]:
    """SM90_BLOCKS the matrix would leave no more than half empty (as sm90_matmul_block weighs them)."""
    return tuple((bm, bn) for bm, bn in SM90_BLOCKS if (bm == 64 or 2 * m > bm) and (bn == 64 or 2 * n > bn))


def wmma_blocks_for(m: int, n: int) -> tuple[tuple[int, int], ...]:
    """matmul.cuh's blocks: each side a power of two from 16 (rows) or 32 (columns) to MATMUL_TILE."""
    rows = [b for b in (16, 32, 64, 128) if b <= max(16, 1 << (m - 1).bit_length())]
    return tuple((bm, bn) for bm in rows for bn in (32, 64, 128))


class Matmul(OpSpec):
    kind = "matmul"
    chain_head = True

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("matmul", inputs, 2)
        no_attrs("matmul", attrs)
        a, b = inputs
        require_float("matmul", a)
        same_dtype("matmul", a, b)
        if len(b.shape) != 2:
            raise ModelError(f"matmul: the right operand must be 2-D [K, N], not {b.shape}")
        if a.shape[-1] != b.shape[0]:
            raise ModelError(f"matmul: inner dimensions differ: {a.shape} @ {b.shape} (K {a.shape[-1]} vs {b.shape[0]})")
        return Built(a.shape[:-1] + (b.shape[1],), a.dtype)

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        if op.attr("k_splits"):  # part s's sums at rows s * M ..
            a, b = args[0].reshape(-1, args[1].shape[0]), args[1]
            kp = b.shape[0] // op.attr("k_splits")
            return np.concatenate([a[:, s * kp:(s + 1) * kp] @ b[s * kp:(s + 1) * kp]
                                   for s in range(op.attr("k_splits"))])
        return fused.apply_epilogue(op.attr("epilogue"), args[0] @ args[1], args[2:])

    def variant(self, model, op: Op, device) -> dict:
        return self._variant(model, op, device, {})

    def knobs(self, model, op: Op, device) -> dict[str, tuple]:
        """The wgmma tile: its block and loader; a skinny matmul: FMA or tensor-core tile and its width; any other:
        matmul.cuh's block. (Split-K parts: none.)"""
        a, b = (model.tensors[i] for i in op.inputs[:2])
        m, k, n = a.rows, a.cols, b.cols
        if op.attr("k_splits"):
            return {}
        if sm90_matmul_block(m, n, k, a.dtype, device.num_sms, device.wgmma) is not None:
            return {"block": sm90_blocks_for(m, n), "loader": ("tma", "cp.async")}
        if skinny(m):
            mma = a.dtype in ("bf16", "fp16") and k % 8 == 0 and n % 8 == 0
            return {"tile": ("gemv", "gemv_mma") if mma else ("gemv",), "width": SKINNY_WIDTHS}
        return {"block": wmma_blocks_for(m, n)}

    def tuned(self, model, op: Op, device, knobs: dict) -> dict:
        allowed = self.knobs(model, op, device)
        for name, value in knobs.items():
            value = tuple(value) if isinstance(value, list) else value
            if name not in allowed or value not in allowed[name]:
                raise ModelError(f"matmul (op {op.id}): knob {name}={value!r} is not one of its choices "
                                 f"{ {k: list(v) for k, v in allowed.items()} }")
        return self._variant(model, op, device, {k: tuple(v) if isinstance(v, list) else v for k, v in knobs.items()})

    def _variant(self, model, op: Op, device, knobs: dict) -> dict:
        a, b = (model.tensors[i] for i in op.inputs[:2])
        m, k, n = a.rows, a.cols, b.cols
        sms, wgmma = device.num_sms, device.wgmma
        parts = op.attr("k_splits")
        if parts:
            kp = k // parts
            bm, bn = split_block(m, n, k, parts, a.dtype, sms, wgmma)
            if sm90_matmul_block(m, n, kp, a.dtype, sms, wgmma) is None:  # a skinny part
                return {**_weights(model, m, n, kp, k, SKINNY_PART_COLS, a.dtype, b, device.name), "k_splits": parts}
            return {**_sm90(bm, bn, kp, parts * -(-m // bm) * -(-n // bn), sms), "k_splits": parts}
        block = sm90_matmul_block(m, n, k, a.dtype, sms, wgmma)
        if block is not None:
            bm, bn = knobs.get("block", block)
            wbn = min(bn, 128)
            epilogue = {"epilogue": sm90_epilogue(bn)} if op.attr("epilogue") else {}
            return {**_sm90(bm, bn, k, -(-m // bm) * -(-n // bn), sms, knobs.get("loader")), **epilogue,
                    "fallback": {"template": "matmul_wmma", "block": [bm, wbn],
                                 "stages": matmul_stages(a.dtype, bm, wbn), "smem": matmul_smem(a.dtype, bm, wbn)}}
        if skinny(m):
            return _weights(model, m, n, k, k, knobs.get("width", skinny_cols(n, sms)), a.dtype, b, device.name,
                            knobs.get("tile"))
        bm, bn = knobs.get("block", matmul_block(m, n, sms))
        return {"template": "matmul_wmma", "block": [bm, bn], "stages": matmul_stages(a.dtype, bm, bn),
                "smem": matmul_smem(a.dtype, bm, bn), "vec": k % 8 == 0 and n % 8 == 0}

    def tiles(self, tm, op: Op, v: dict) -> None:
        a, b = tm.ins[:2]
        m, k, n = a.rows, a.cols, b.cols
        bm, bn = v["block"]
        parts = v.get("k_splits")
        if parts:  # part s of K writes rows s * M .. of the fp32 parts
            kp = k // parts
            for s in range(parts):
                k0, k1 = s * kp, (s + 1) * kp
                for r0, r1 in chunks(m, bm):
                    for c0, c1 in chunks(n, bn):
                        reads = [Region(a.id, r0, r1, k0, k1), Region(b.id, k0, k1, c0, c1)]
                        tm.add(s * m + r0, s * m + r1, c0, c1, reads,
                               ((r1 - r0) * kp + kp * (c1 - c0)) * 2 + (r1 - r0) * (c1 - c0) * 4,
                               2 * (r1 - r0) * (c1 - c0) * kp)
            return
        for r0, r1, c0, c1 in block_order(m, n, bm, bn, tm.num_sms):
            reads = [Region(a.id, r0, r1, 0, k), Region(b.id, 0, k, c0, c1)]
            reads += [read_like(t, tm.out, r0, r1, c0, c1) for t in tm.ins[2:]]  # the epilogue's inputs (fusion.py)
            tm.add(r0, r1, c0, c1, reads, ((r1 - r0) * k + k * (c1 - c0) + (r1 - r0) * (c1 - c0) * (len(tm.ins) - 1))
                   * tm.esize, 2 * (r1 - r0) * (c1 - c0) * k)

    def emit(self, e, op: Op, v: dict) -> str:
        a, b, out = e.tensor(op.inputs[0]), e.tensor(op.inputs[1]), e.tensor(op.output)
        x = [e.ptr(i) for i in op.inputs]
        o = e.ptr(out.id, const=False)
        if v.get("k_splits"):
            return self._part(e, op, v, a, b, x, o)
        epi = e.epilogue(op, out, [e.tensor(i) for i in op.inputs[2:]])
        template = v["template"]
        if template in ("gemv", "gemv_mma"):
            return self._weights_call(e, op, v, a.dtype, a.rows, b.cols, a.cols, x[0], x[1], o, a.cols, epi)
        ct = e.ctype(out)
        bm, bn = v["block"]
        if template == "matmul_wmma":
            stages, smem = v["stages"], v["smem"]
            e.need_smem(smem, f"static_assert(ark::matmul_smem<{ct}, {bm}, {bn}, {stages}>() == {smem}, "
                              "\"matmul.py's matmul_smem\");")
            return (f"ark::matmul_tile<{ct}, {bm}, {bn}, {stages}, {'true' if v['vec'] else 'false'}>({x[0]}, {x[1]}, "
                    f"{o}, {a.rows}, {b.cols}, {a.cols}, r0, r1, c0, c1, smem{epi});")
        # matmul_sm90, with the WMMA template on each 128-column part of the block where wgmma is not compiled
        stages, smem = v["stages"], v["smem"]
        fb = v["fallback"]
        wbn, wstages, wsmem = fb["block"][1], fb["stages"], fb["smem"]
        e.wgmma = True
        e.need_smem(smem, f"static_assert(ark::matmul_sm90_smem<{bm}, {bn}, {stages}>() == {smem}, "
                          "\"matmul.py's matmul_sm90_smem\");")
        e.need_smem(wsmem, f"static_assert(ark::matmul_smem<{ct}, {bm}, {wbn}, {wstages}>() == {wsmem}, "
                           "\"matmul.py's matmul_smem\");")
        shape = f"{x[0]}, {x[1]}, {o}, {a.rows}, {b.cols}, {a.cols}"
        wmma = f"ark::matmul_tile<{ct}, {bm}, {wbn}, {wstages}, true>"
        staged = ", true" if v.get("epilogue") == "staged" else ""
        if v["loader"] == "tma":
            call = (f"ark::matmul_tile_sm90_tma<{ct}, {bm}, {bn}, {stages}{staged}>({self._maps(e, op, a, b, bm)}, "
                    f"{o}, {a.rows}, {b.cols}, {a.cols}, 0, r0, r1, c0, c1, smem{epi});")
        else:
            call = (f"ark::matmul_tile_sm90<{ct}, {bm}, {bn}, {stages}{staged}>({shape}, r0, r1, c0, c1, smem"
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

    def _part(self, e, op: Op, v: dict, a: Tensor, b: Tensor, x: list[str], o: str) -> str:
        """One part of a split-K matmul: the tile's rows say which part (rows s * M .. of the fp32 parts); the wgmma
        tile over the part's K, A's rows a whole K apart (or, for a skinny matmul, a weight-streaming tile's)."""
        ct = e.ctype(a)
        parts = v["k_splits"]
        m, n, k = a.rows, b.cols, a.cols
        kp = k // parts
        part = (f"const int s = r0 / {m}; const long long k0 = (long long)s * {kp};\n"
                f"      const {ct}* pa = {x[0]} + k0; const {ct}* pb = {x[1]} + k0 * {n}; "
                f"float* po = {o} + (long long)s * {m * n};")
        if v["template"] in ("gemv", "gemv_mma"):
            call = self._weights_call(e, op, v, a.dtype, m, n, kp, "pa", "pb", "po", k)
            return f"{{\n      {part}\n      {call}\n      }}"
        bm, bn = v["block"]
        stages, smem = v["stages"], v["smem"]
        e.wgmma = True
        e.need_smem(smem, f"static_assert(ark::matmul_sm90_smem<{bm}, {bn}, {stages}>() == {smem}, "
                          "\"matmul.py's matmul_sm90_smem\");")
        if v["loader"] == "tma":
            call = (f"ark::matmul_tile_sm90_tma<{ct}, {bm}, {bn}, {stages}, false, float>("
                    f"{self._maps(e, op, a, b, bm)}, po, {m}, {n}, {kp}, (int)k0, r0 - s * {m}, r1 - s * {m}, c0, c1, "
                    "smem);")
        else:
            call = (f"ark::matmul_tile_sm90<{ct}, {bm}, {bn}, {stages}, false, float>(pa, pb, po, {m}, {n}, {kp}, "
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

    @staticmethod
    def _weights_call(e, op: Op, v: dict, dtype: str, m: int, n: int, k: int, pa: str, pb: str, po: str, lda: int,
                      epi: str = "") -> str:
        """gemv.cuh's tile (gemv_mma.cuh's) of v's columns over K = k (A's rows lda apart), its shared memory
        asserted. Its rows are all of A's M: r0 % M is 0 (a split part's rows in the parts start at s * M). The tile
        takes the loop's `mode` where it may preload (its first slices then load before the tile's waits)."""
        ct = e.ctype_of(dtype)
        w = v["block"][1]
        mode = "ark::TILE_RUN"
        if v["preload"]:
            e.early.add(op.id)
            mode = "mode"
        if v["template"] == "gemv_mma":
            params = f"{ct}, {m}, {w}, {v['stages']}"
            e.need_smem(v["smem"], f"static_assert(ark::gemv_mma_smem<{params}>() == {v['smem']}, "
                                   "\"matmul.py's GemvMmaConfig.smem\");")
            return (f"ark::gemv_mma_tile<{params}>({pa}, {pb}, {po}, {n}, {k}, {lda}, r0 % {m}, c0, c1, "
                    f"smem, {mode}{epi});")
        params = f"{ct}, {m}, {w}, {v['cpt']}, {v['rpt']}"
        e.need_smem(v["smem"], f"static_assert(ark::gemv_smem<{params}, {v['stages']}>() == {v['smem']}, "
                               "\"matmul.py's GemvConfig.smem\");")
        return (f"ark::gemv_tile<{params}, {v['stages']}, {'true' if v['vec'] else 'false'}>({pa}, {pb}, {po}, {n}, "
                f"{k}, {lda}, r0 % {m}, c0, c1, smem, {mode}{epi});")

    @staticmethod
    def _maps(e, op: Op, a: Tensor, b: Tensor, bm: int) -> str:
        """The arguments naming op's tensor maps of A (box 64 x bm) and B (box 64 x 64), which the host makes."""
        return e.tensor_maps(op, a, b, bm, SM90_BK)


SPEC = Matmul()
