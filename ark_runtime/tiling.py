"""Ops cut into tiles (vCTAs): each tile writes one region of its op's output and reads regions of its inputs,
in the 2-D view of every tensor (all axes but the last folded into rows). A tile depends on the tiles of
earlier ops whose written regions its reads overlap; regions that broadcast or gather (embedding rows,
norm weights) are read whole, which can only add dependencies, never lose one."""

from __future__ import annotations

import bisect
import math
import os
from dataclasses import dataclass
from fractions import Fraction

from ark_runtime.model import DTYPE_BYTES, Model, Op, Tensor

MATMUL_TILE = 128
MIN_MATMUL_TILE = 32
SKINNY_ROWS = 16  # a matmul with at most this many rows streams its weights (gemv.cuh, gemv_mma.cuh), see `skinny`
SKINNY_WIDTHS = (128, 64, 32)  # its tiles' columns, widest first; 32 at least: rows of B read 64 bytes or more
ATTENTION_BLOCKS = (64, 32, 16)  # queries per attention tile, most first (attention.cuh: 16-row groups)
MIN_TILE_ELEMENTS = 2048
MAX_TILE_COLS = 8192


@dataclass(frozen=True)
class Region:
    """Rows [r0, r1) and columns [c0, c1) of a tensor's 2-D view."""

    tensor: int
    r0: int
    r1: int
    c0: int
    c1: int

    def overlaps(self, o: Region) -> bool:
        return self.tensor == o.tensor and self.r0 < o.r1 and o.r0 < self.r1 and self.c0 < o.c1 and o.c0 < self.c1

    def as_json(self) -> list[int]:
        return [self.tensor, self.r0, self.r1, self.c0, self.c1]

    @staticmethod
    def whole(t: Tensor) -> Region:
        return Region(t.id, 0, t.rows, 0, t.cols)


@dataclass(frozen=True)
class Tile:
    id: int
    op: int
    index: int  # within its op
    writes: Region
    reads: tuple[Region, ...]
    bytes: int  # moved to and from memory (an estimate, for the schedule)
    flops: int
    dma: bool = False  # a copy posted to a DMA engine, not computed by the CTA

    def as_json(self) -> dict:
        return {"id": self.id, "op": self.op, "index": self.index, "writes": self.writes.as_json(),
                "reads": [r.as_json() for r in self.reads], "bytes": self.bytes, "flops": self.flops,
                "dma": self.dma}


MAX_TILES = 1 << 20  # tiles a plan may have: past this the planner's time and memory give out, not the GPU's


class TooManyTiles(ValueError):
    """A model whose plan would have more than MAX_TILES tiles."""


def _count(n: int) -> int:
    """`n`, the tiles about to be made, if a plan may have them; checked before they are made."""
    if n > MAX_TILES:
        raise TooManyTiles(f"{n:,} tiles")
    return n


def _chunks(n: int, size: int) -> list[tuple[int, int]]:
    _count(-(-n // size))
    return [(i, min(i + size, n)) for i in range(0, n, size)]


def _elementwise_blocks(out: Tensor, num_sms: int, pairs: bool = False) -> list[tuple[int, int, int, int]]:
    """Blocks of about equal size; with `pairs` (RoPE turns columns 2j and 2j+1 together) never between a pair."""
    per_tile = max(MIN_TILE_ELEMENTS, math.ceil(out.elements / num_sms))
    if out.cols >= per_tile or out.cols > MAX_TILE_COLS:
        width = min(per_tile, MAX_TILE_COLS)
        width += width % 2 if pairs else 0
        cols = _chunks(out.cols, width)
        _count(out.rows * len(cols))
        return [(r, r + 1, c0, c1) for r in range(out.rows) for c0, c1 in cols]
    return [(r0, r1, 0, out.cols) for r0, r1 in _chunks(out.rows, max(1, per_tile // out.cols))]


MIN_ROW_TILE_ELEMENTS = 1024  # rows shorter than this share a tile (1024 // cols of them at least)
ROW_THREADS = 256  # rows.cuh: the CTA's threads


def row_block_rows(rows: int, cols: int, num_sms: int) -> int:
    """Rows per tile of a row-wise op over rows of `cols` elements: the rows spread over the SMs, but short rows
    grouped so a tile holds about MIN_ROW_TILE_ELEMENTS at least."""
    return max(1, math.ceil(rows / num_sms), MIN_ROW_TILE_ELEMENTS // cols)


def _row_blocks(out: Tensor, num_sms: int, cols: int | None = None) -> list[tuple[int, int, int, int]]:
    """Row blocks of `out`, whose rows read `cols` elements each (out.cols unless given: a reduction's rows)."""
    per = row_block_rows(out.rows, out.cols if cols is None else cols, num_sms)
    return [(r0, r1, 0, out.cols) for r0, r1 in _chunks(out.rows, per)]


def row_team(dtype: str, rows: int, cols: int, num_sms: int) -> int:
    """rows.cuh's team size NT for a row-wise op (reductions, softmax, norms) over `rows` rows of `cols`: threads
    per row, a warp up to the CTA's 256. As many teams as the tile has rows (up to 8, a power of two), each no
    wider than the row has pieces (16 bytes where cols is a multiple of 16 bytes' elements, else one element),
    widened until a thread holds its share of the row in registers (RowShape::MAXC pieces: 64 bytes, or 16
    elements); past 256 threads the template reads the row in slabs."""
    per_tile = row_block_rows(rows, cols, num_sms)
    w = 16 // DTYPE_BYTES[dtype]
    v = w if cols % w == 0 else 1
    pieces, maxc = cols // v, (4 if v > 1 else 16)
    teams = min(ROW_THREADS // 32, 1 << (per_tile - 1).bit_length())
    nt = min(ROW_THREADS // teams, max(32, 1 << (pieces - 1).bit_length()))
    while nt < ROW_THREADS and -(-pieces // nt) > maxc:
        nt *= 2
    return nt


def _read_like(t: Tensor, out: Tensor, r0: int, r1: int, c0: int, c1: int) -> Region:
    """The part of input `t` an elementwise tile of `out` reads: the same region when shapes agree, the
    same columns of one row when `t` is broadcast over rows, else all of `t`."""
    if t.shape == out.shape:
        return Region(t.id, r0, r1, c0, c1)
    if t.rows == 1 and t.cols == out.cols:
        return Region(t.id, 0, 1, c0, c1)
    return Region.whole(t)


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


def attention_block(seq: int, d: int, heads: int, num_sms: int) -> int:
    """Queries per attention tile: 64, halved while the tiles (heads x batch x query blocks, `heads` counting
    both) do not fill the SMs or the block is twice the (16-rounded) sequence or more; 16 at the least, 32 for
    head dimensions above 128 (attention.cuh's 16-query tile would need 135 KiB of shared memory there)."""
    least = 16 if -(-d // 16) * 16 <= 128 else 32
    bq = ATTENTION_BLOCKS[0]
    while bq > least and (heads * -(-seq // bq) < num_sms or bq >= 2 * -(-seq // 16) * 16):
        bq //= 2
    return bq


# A bf16/fp16 skinny matmul of more rows than this multiplies on tensor cores with its operands swapped
# (gemv_mma.cuh) where K and N are multiples of 8, rather than on gemv.cuh's FMA units: mlp at batch 1, 2, 4, 8, 16
# on an H200 (us per iteration) took on the FMA tile 70.8, 69.1, 73.0, 95.2, 164.8, the FMAs setting the pace from
# 8 rows (bench/results/h200/experiments/skinny.json). On an H100 mlp-b8 took 92.5-92.7 on gemv_mma.cuh against
# 94.0-95.0 with A padded to the wgmma tile's 64 rows (bench/results/h100/experiments/skinny_mma/).
SKINNY_ROWS_FMA = 4


def skinny_mma(m: int, n: int, k: int, dtype: str) -> bool:
    """Whether a skinny matmul takes gemv_mma.cuh (tensor cores, 16-byte copies) rather than gemv.cuh's FMA tile."""
    return SKINNY_ROWS_FMA < m <= SKINNY_ROWS and dtype in ("bf16", "fp16") and k % 8 == 0 and n % 8 == 0


def skinny(m: int) -> bool:
    """Whether a matmul of `m` rows takes a weight-streaming tile (gemv.cuh on FMA units, or gemv_mma.cuh on tensor
    cores: `skinny_mma`) instead of a tile whose 64-row (wgmma) or 16-row (WMMA) blocks would be mostly padding.
    Each weight serves m rows: per 16 KiB of bf16 weights gemv.cuh's CTA issues about 8 x 430 warp instructions at
    m = 8 (0.5 us at 1.75 GHz, where an H100 SM's share of the memory's 3 TB/s brings them in 0.7 us) and twice that
    at m = 16, so past SKINNY_ROWS_FMA rows the mma tile does the multiplies (4 x m / 8 mma per warp a slice);
    above 16 rows a tile's fragments fill and the block tiles' reuse of B pays."""
    return m <= SKINNY_ROWS


def skinny_cols(n: int, num_sms: int) -> int:
    """The columns of a skinny matmul's tile, which owns them for all rows and all of K (unless k_splits cuts K
    where this is narrower than SKINNY_PART_COLS). Of SKINNY_WIDTHS, the one whose tiles fill the SMs' waves best
    (tiles / (waves x SMs)), the widest of equals, as fewer tiles cost fewer fills of the pipeline and reductions:
    N = 16384 on 132 SMs gives 128 tiles of 128 columns, N = 4096 128 tiles of 32. Below 32 x num_sms columns some
    SMs idle."""
    def fill(w: int) -> Fraction:
        tiles = -(-n // w)
        return Fraction(tiles, -(-tiles // num_sms) * num_sms)
    return max(SKINNY_WIDTHS, key=fill)


OFF = ("0", "off", "no", "false")  # what an ARK_* switch in the environment takes for off (any case, spaces around)


def switched_off(name: str) -> bool:
    """Whether environment variable `name` turns its switch off (unset: on)."""
    return os.environ.get(name, "").strip().lower() in OFF


SM90_ENV = "ARK_SM90_MATMUL"  # "0" (or "off", "no", "false"): never the Hopper wgmma tile
# matmul_sm90.cuh's blocks (BM x BN), largest first; of equal areas the taller first (B, the weights, is then read
# by fewer block rows). BM 128: a warpgroup per 64 rows; BM 64: the warpgroups split each slice's K.
SM90_BLOCKS = ((128, 256), (128, 128), (64, 256), (128, 64), (64, 128), (64, 64))
SM90_FILL = Fraction(7, 8)  # "fills the SMs": at least this many tiles per SM (128 tiles on 132 SMs do)


def sm90_enabled() -> bool:
    return not switched_off(SM90_ENV)


def sm90_matmul_block(m: int, n: int, k: int, dtype: str, num_sms: int, wgmma: bool = True) -> tuple[int, int] | None:
    """The output block (BM, BN) of the Hopper wgmma tile (include/ark/matmul_sm90.cuh) for a bf16/fp16 matmul,
    or None where another tile runs: the skinny tiles (`skinny`: M <= 16), or `matmul_block`'s WMMA tile for fp32,
    for K or N not a multiple of 8 (the tile loads 16-byte rows) and with $ARK_SM90_MATMUL=0.
    The rule: of SM90_BLOCKS (largest first), leaving out blocks that the matrix would leave more than half empty
    (128 rows for M <= 64, 256 columns for N <= 128, 128 for N <= 64), the first whose tiles fill the SMs
    (SM90_FILL per SM), else the smallest, 64 x 64. Codegen and the tiling both ask here, so the plan's regions
    are the template's."""
    if not wgmma or not sm90_enabled() or dtype not in ("bf16", "fp16") or k % 8 or n % 8 or k < 8 or n < 8 \
            or skinny(m):
        return None
    blocks = [(bm, bn) for bm, bn in SM90_BLOCKS if (bm == 64 or 2 * m > bm) and (bn == 64 or 2 * n > bn)]
    for bm, bn in blocks:
        if -(-m // bm) * -(-n // bn) >= SM90_FILL * num_sms:
            return bm, bn
    return blocks[-1]


SM90_BK = 64  # matmul_sm90.cuh: K per slice
K_SPLITS = (8, 4, 2)  # parts a matmul's K may be cut into (split_k.py), most first
# K of one part at least. The sum is one more dependency level (about 2-3 us of waiting and a tile on the H200), so
# a split pays only where a part saves more than that: block-s128's K = 1024 projections split in two ran no faster.
MIN_PART_K = 1024


# A skinny matmul's widest tiles (gemv.cuh, gemv_mma.cuh): a split part takes these. Narrower tiles read shorter
# pieces of each row of B and stream slower on an H100: mlp-b1's down projection in 32-column tiles took 38.6-46.3 us
# a tile (44.2 mean) against 41.2-43.2 (42.0) for its up projection's 128-column tiles, the same 1 MiB of weights
# each (bench/results/h100/experiments/sm_spread/).
SKINNY_PART_COLS = SKINNY_WIDTHS[0]


def _parts(tiles: int, k: int, num_sms: int, least: int = 2) -> int:
    if 2 * tiles > num_sms:
        return 1
    for s in K_SPLITS:
        if s >= least and tiles * s <= num_sms and k % (s * SM90_BK) == 0 and k // s >= MIN_PART_K:
            return s
    return 1


def split_plan(m: int, n: int, k: int, dtype: str, num_sms: int, wgmma: bool = True) -> tuple[int, tuple[int, int]]:
    """(parts to cut a matmul's K into, the output block of a part's tiles); 1 part: no split.
    Where the wgmma tile runs and its tiles fill at most half the SMs, or where a skinny matmul (`skinny`) would take
    tiles narrower than SKINNY_PART_COLS: then the most parts whose tiles (SKINNY_PART_COLS wide for a skinny one,
    and then enough parts that a tile reads no more of B than the narrow tile would) still fit on the SMs at once,
    each a whole number of 64-wide slices and at least MIN_PART_K long. (Each part's sums go to fp32 memory and a sum
    op adds them: worth it only where SMs would otherwise sit idle, or read narrow tiles, through a long K.)"""
    block = sm90_matmul_block(m, n, k, dtype, num_sms, wgmma)
    if block is None:
        width = skinny_cols(n, num_sms)
        if not skinny(m) or width >= SKINNY_PART_COLS:
            return 1, (m, width)
        part = (m, SKINNY_PART_COLS)
        least = -(-min(n, SKINNY_PART_COLS) // width)  # a part's tile reads no more of B than the unsplit tile
        return _parts(-(-n // SKINNY_PART_COLS), k, num_sms, least), part

    def tiles(b: tuple[int, int]) -> int:
        return -(-m // b[0]) * -(-n // b[1])

    return _parts(tiles(block), k, num_sms), block


def k_splits(m: int, n: int, k: int, dtype: str, num_sms: int, wgmma: bool = True) -> int:
    """Parts to cut a matmul's K into (1: none); see split_plan."""
    return split_plan(m, n, k, dtype, num_sms, wgmma)[0]


def split_block(m: int, n: int, k: int, parts: int, dtype: str, num_sms: int, wgmma: bool = True) -> tuple[int, int]:
    """The output block of the tiles of a matmul's K cut into `parts` (K // parts each): split_plan's where it cuts
    that many, else the wgmma tile's for the part's K, or a skinny matmul's SKINNY_PART_COLS columns for all its
    rows (gemv.cuh, gemv_mma.cuh)."""
    chosen, block = split_plan(m, n, k, dtype, num_sms, wgmma)
    if chosen == parts:
        return block
    return sm90_matmul_block(m, n, k // parts, dtype, num_sms, wgmma) or (m, SKINNY_PART_COLS)


def block_order(m: int, n: int, bm: int, bn: int, num_sms: int) -> list[tuple[int, int, int, int]]:
    """A matmul's output blocks (r0, r1, c0, c1) in the order the schedule deals them to SMs: down a band of `g` block
    rows, then the next column, band after band. The SMs then work at once on about g block rows and num_sms / g
    block columns, and g = sqrt(num_sms * bn / bm) makes the A rows and B columns they read about equal in bytes,
    which keeps each wave's inputs in L2. Row after row instead, a wave of 8192^3 in 128 x 256 blocks reads all of B:
    on the H200 that ran at 2,674 us against 1,752 in bands (bench/results/h200/experiments/tma_raster)."""
    rows, cols = _chunks(m, bm), _chunks(n, bn)
    _count(len(rows) * len(cols))
    g = min(len(rows), max(1, round(math.sqrt(num_sms * bn / bm))))
    return [(r0, r1, c0, c1) for band in range(0, len(rows), g) for c0, c1 in cols for r0, r1 in rows[band:band + g]]


def op_tiles(model: Model, op: Op, first_id: int, num_sms: int, sm_copy: bool = False, wgmma: bool = True) -> list[Tile]:
    """`sm_copy`: a copy op moved by the CTAs' own stores, cut like an elementwise op (each tile a contiguous
    byte range, so the SMs copy in parallel); otherwise a copy is one tile that posts one DMA. `wgmma`: the GPU
    has Hopper's warpgroup MMA (else no matmul is cut for matmul_sm90.cuh)."""
    ts = model.tensors
    out = ts[op.output]
    ins = [ts[i] for i in op.inputs]
    esize = DTYPE_BYTES[out.dtype]
    tiles: list[Tile] = []

    def add(r0, r1, c0, c1, reads, nbytes, flops, dma=False):
        _count(first_id + len(tiles) + 1)
        tiles.append(Tile(first_id + len(tiles), op.id, len(tiles), Region(out.id, r0, r1, c0, c1), tuple(reads),
                          nbytes, flops, dma))

    if op.kind in ("unary", "binary", "rope", "fused"):
        steps = len(op.attr("steps", ())) or 1
        for r0, r1, c0, c1 in _elementwise_blocks(out, num_sms, pairs=op.kind == "rope"):
            n = (r1 - r0) * (c1 - c0)
            reads = [_read_like(t, out, r0, r1, c0, c1) for t in ins]
            add(r0, r1, c0, c1, reads, n * esize * (len(ins) + 1), n * 8 * steps)
    elif op.kind in ("reduce", "softmax", "layernorm", "rmsnorm"):
        x = ins[0]
        for r0, r1, _, _ in _row_blocks(out, num_sms, x.cols):
            n = (r1 - r0) * x.cols
            reads = [Region(x.id, r0, r1, 0, x.cols)] + [Region.whole(p) for p in ins[1:]]
            add(r0, r1, 0, out.cols, reads, n * esize + (r1 - r0) * out.cols * esize, 5 * n)
    elif op.kind == "matmul" and op.attr("k_splits"):  # part s of K writes rows s * M .. of the fp32 parts
        a, b = ins[:2]
        parts = op.attr("k_splits")
        m, n, kp = a.rows, b.cols, a.cols // parts
        bm, bn = split_block(m, n, a.cols, parts, a.dtype, num_sms, wgmma)
        for s in range(parts):
            k0, k1 = s * kp, (s + 1) * kp
            for r0, r1 in _chunks(m, bm):
                for c0, c1 in _chunks(n, bn):
                    reads = [Region(a.id, r0, r1, k0, k1), Region(b.id, k0, k1, c0, c1)]
                    add(s * m + r0, s * m + r1, c0, c1, reads,
                        ((r1 - r0) * kp + kp * (c1 - c0)) * 2 + (r1 - r0) * (c1 - c0) * 4, 2 * (r1 - r0) * (c1 - c0) * kp)
    elif op.kind == "split_sum":
        part = ins[0]
        parts = op.attr("k_splits")
        for r0, r1, c0, c1 in _elementwise_blocks(out, num_sms):
            cells = (r1 - r0) * (c1 - c0)
            reads = [Region(part.id, s * out.rows + r0, s * out.rows + r1, c0, c1) for s in range(parts)]
            reads += [_read_like(t, out, r0, r1, c0, c1) for t in ins[1:]]  # the epilogue's inputs (fusion.py)
            add(r0, r1, c0, c1, reads, cells * (4 * parts + esize * len(ins)), cells * parts)
    elif op.kind == "matmul":
        a, b = ins[:2]
        m, k, n = a.rows, a.cols, b.cols
        bm, bn = (m, skinny_cols(n, num_sms)) if skinny(m) else matmul_block(m, n, num_sms)
        bm, bn = sm90_matmul_block(m, n, k, out.dtype, num_sms, wgmma) or (bm, bn)  # bf16/fp16: the wgmma tile
        for r0, r1, c0, c1 in block_order(m, n, bm, bn, num_sms):
            reads = [Region(a.id, r0, r1, 0, k), Region(b.id, 0, k, c0, c1)]
            reads += [_read_like(t, out, r0, r1, c0, c1) for t in ins[2:]]  # the epilogue's inputs (fusion.py)
            add(r0, r1, c0, c1, reads, ((r1 - r0) * k + k * (c1 - c0) + (r1 - r0) * (c1 - c0) * (len(ins) - 1))
                * esize, 2 * (r1 - r0) * (c1 - c0) * k)
    elif op.kind == "attention":
        q, k, v = ins
        s, e = q.shape[-2], q.shape[-1]
        heads, causal = op.attr("heads"), op.attr("causal", True)
        d = e // heads
        bq = attention_block(s, d, heads * (q.rows // s), num_sms)
        # causal: the query blocks with the most keys first, across every head and sequence, so that the schedule
        # (list scheduling in tile order) deals the longest tiles out first and fills in with the short ones
        blocks = _chunks(s, bq)
        for q0, q1 in (reversed(blocks) if causal else blocks):
            for b in range(q.rows // s):
                for h in range(heads):
                    kv_end = q1 if causal else s
                    base, c0, c1 = b * s, h * d, (h + 1) * d
                    reads = [Region(q.id, base + q0, base + q1, c0, c1), Region(k.id, base, base + kv_end, c0, c1),
                             Region(v.id, base, base + kv_end, c0, c1)]
                    add(base + q0, base + q1, c0, c1, reads, ((q1 - q0) * 2 + 2 * kv_end) * d * esize,
                        4 * (q1 - q0) * kv_end * d)
    elif op.kind == "embedding":
        table, ids = ins
        for r0, r1, _, _ in _row_blocks(out, num_sms):
            add(r0, r1, 0, out.cols, [Region.whole(table), Region.whole(ids)], 2 * (r1 - r0) * out.cols * esize, 0)
    elif op.kind == "copy" and sm_copy:
        for r0, r1, c0, c1 in _elementwise_blocks(out, num_sms):
            add(r0, r1, c0, c1, [Region(ins[0].id, r0, r1, c0, c1)], 2 * (r1 - r0) * (c1 - c0) * esize, 0)
    elif op.kind == "copy":
        add(0, out.rows, 0, out.cols, [Region.whole(ins[0])], 2 * out.nbytes, 0, dma=True)
    else:
        raise ValueError(f"op {op.id} has kind {op.kind!r}, which has no tiling")
    return tiles


def tile_model(model: Model, num_sms: int, sm_copies: frozenset[int] = frozenset(), wgmma: bool = True) -> list[Tile]:
    """Every op's tiles, in op order; TooManyTiles, naming the op, where the plan would pass MAX_TILES."""
    tiles: list[Tile] = []
    for op in model.ops:
        try:
            tiles.extend(op_tiles(model, op, len(tiles), num_sms, op.id in sm_copies, wgmma))
        except TooManyTiles as exc:
            out = model.tensors[op.output]
            raise TooManyTiles(f"op {op.id} ({op.kind} -> {out.name}, shape {out.shape}) would take the plan to {exc}, "
                               f"past the {MAX_TILES:,} a plan may have ({len(tiles):,} before it): make its "
                               "tensors smaller, or the model fewer ops") from None
    return tiles


def dependencies(model: Model, tiles: list[Tile]) -> list[tuple[int, ...]]:
    """For each tile, the tiles (of the ops that write its inputs) whose written regions its reads overlap."""
    by_tensor: dict[int, list[Tile]] = {}
    for t in tiles:
        by_tensor.setdefault(t.writes.tensor, []).append(t)
    starts: dict[int, list[int]] = {}
    for k, v in by_tensor.items():  # each tensor's writers sorted by first row, for the bisect below
        order = sorted(range(len(v)), key=lambda i: v[i].writes.r0)
        by_tensor[k] = [v[i] for i in order]
        starts[k] = [v[i].writes.r0 for i in order]
    deps = []
    for t in tiles:
        found: set[int] = set()
        for g in t.reads:
            writers = by_tensor.get(g.tensor, ())
            hi = bisect.bisect_left(starts.get(g.tensor, []), g.r1)
            found.update(w.id for w in writers[:hi] if w.writes.overlaps(g))
        deps.append(tuple(sorted(found)))
    return deps
