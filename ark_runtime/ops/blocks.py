"""How the op specs cut outputs that they share: elementwise blocks of about equal size, row blocks for row-wise
ops (reductions, softmax, norms, gathers) with the thread team each row gets, and the region of an input that an
elementwise tile reads."""

from __future__ import annotations

import math

from ark_runtime.graph import DTYPE_BYTES, Tensor
from ark_runtime.ops.spec import OpSpec
from ark_runtime.tiling import Region, chunks, count

MIN_TILE_ELEMENTS = 2048
MAX_TILE_COLS = 8192
MIN_ROW_TILE_ELEMENTS = 1024  # rows shorter than this share a tile (1024 // cols of them at least)
ROW_THREADS = 256  # rows.cuh: the CTA's threads


def elementwise_blocks(out: Tensor, num_sms: int, pairs: bool = False) -> list[tuple[int, int, int, int]]:
    """Blocks of about equal size; with `pairs` (RoPE turns columns 2j and 2j+1 together) never between a pair."""
    per_tile = max(MIN_TILE_ELEMENTS, math.ceil(out.elements / num_sms))
    if out.cols >= per_tile or out.cols > MAX_TILE_COLS:
        width = min(per_tile, MAX_TILE_COLS)
        width += width % 2 if pairs else 0
        cols = chunks(out.cols, width)
        count(out.rows * len(cols))
        return [(r, r + 1, c0, c1) for r in range(out.rows) for c0, c1 in cols]
    return [(r0, r1, 0, out.cols) for r0, r1 in chunks(out.rows, max(1, per_tile // out.cols))]


def row_block_rows(rows: int, cols: int, num_sms: int) -> int:
    """Rows per tile of a row-wise op over rows of `cols` elements: the rows spread over the SMs, but short rows
    grouped so a tile holds about MIN_ROW_TILE_ELEMENTS at least."""
    return max(1, math.ceil(rows / num_sms), MIN_ROW_TILE_ELEMENTS // cols)


def row_blocks(out: Tensor, num_sms: int, cols: int | None = None) -> list[tuple[int, int, int, int]]:
    """Row blocks of `out`, whose rows read `cols` elements each (out.cols unless given: a reduction's rows)."""
    per = row_block_rows(out.rows, out.cols if cols is None else cols, num_sms)
    return [(r0, r1, 0, out.cols) for r0, r1 in chunks(out.rows, per)]


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


def read_like(t: Tensor, out: Tensor, r0: int, r1: int, c0: int, c1: int) -> Region:
    """The part of input `t` an elementwise tile of `out` reads: the same region when shapes agree, the
    same columns of one row when `t` is broadcast over rows, else all of `t`."""
    if t.shape == out.shape:
        return Region(t.id, r0, r1, c0, c1)
    if t.rows == 1 and t.cols == out.cols:
        return Region(t.id, 0, 1, c0, c1)
    return Region.whole(t)


def elementwise_tiles(tm, steps: int = 1, pairs: bool = False) -> None:
    """An elementwise op's tiles (unary, binary, fused chains, RoPE): blocks of its output, each reading the same
    block of every input (or what it broadcasts from)."""
    out = tm.out
    for r0, r1, c0, c1 in elementwise_blocks(out, tm.num_sms, pairs=pairs):
        n = (r1 - r0) * (c1 - c0)
        reads = [read_like(t, out, r0, r1, c0, c1) for t in tm.ins]
        tm.add(r0, r1, c0, c1, reads, n * tm.esize * (len(tm.ins) + 1), n * 8 * steps)


def row_tiles(tm) -> None:
    """A row-wise op's tiles (reductions, softmax, norms): blocks of whole rows of its first input, the others (norm
    weights) read whole."""
    x, out = tm.ins[0], tm.out
    for r0, r1, _, _ in row_blocks(out, tm.num_sms, x.cols):
        n = (r1 - r0) * x.cols
        reads = [Region(x.id, r0, r1, 0, x.cols)] + [Region.whole(p) for p in tm.ins[1:]]
        tm.add(r0, r1, 0, out.cols, reads, n * tm.esize + (r1 - r0) * out.cols * tm.esize, 5 * n)

ROW_SMEM = 256  # rows.cuh's ROW_SMEM: the team reductions' slots


def row_variant(template: str, op, model, device) -> dict:
    """A row-wise op's kernel choice: rows per tile and threads per row (blocks.row_team)."""
    x, out = model.tensors[op.inputs[0]], model.tensors[op.output]
    return {"template": template, "rows_per_tile": row_block_rows(out.rows, x.cols, device.num_sms),
            "team": row_team(out.dtype, out.rows, x.cols, device.num_sms)}


def row_smem(e) -> None:
    """The shared memory every row-wise template takes (checked against rows.cuh)."""
    e.need_smem(ROW_SMEM, f"static_assert(ark::ROW_SMEM <= {ROW_SMEM}, \"ark_runtime/ops/blocks.py's ROW_SMEM\");")


class RowSpec(OpSpec):
    """An op over whole rows of its first input (rows.cuh): row blocks as tiles, a thread team per row. A subclass
    names its `template` and writes build, reference and the call (`row_call`)."""

    template: str = ""

    def variant(self, model, op, device) -> dict:
        return row_variant(self.template, op, model, device)

    def tiles(self, tm, op, v: dict) -> None:
        row_tiles(tm)

    def emit(self, e, op, v: dict) -> str:
        row_smem(e)
        return self.row_call(e, op, v, e.tensor(op.inputs[0]), e.tensor(op.output))

    def row_call(self, e, op, v: dict, x, out) -> str:
        raise NotImplementedError
