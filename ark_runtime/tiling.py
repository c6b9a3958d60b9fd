"""Ops cut into tiles (vCTAs): each tile writes one region of its op's output and reads regions of its inputs,
in the 2-D view of every tensor (all axes but the last folded into rows). A tile depends on the tiles of
earlier ops whose written regions its reads overlap; regions that broadcast or gather (embedding rows,
norm weights) are read whole, which can only add dependencies, never lose one."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from ark_runtime.model import DTYPE_BYTES, Model, Op, Tensor

MATMUL_TILE = 128
MIN_MATMUL_TILE = 32
ATTENTION_BLOCK = 64
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


def _chunks(n: int, size: int) -> list[tuple[int, int]]:
    return [(i, min(i + size, n)) for i in range(0, n, size)]


def _elementwise_blocks(out: Tensor, num_sms: int, pairs: bool = False) -> list[tuple[int, int, int, int]]:
    """Blocks of about equal size; with `pairs` (RoPE turns columns 2j and 2j+1 together) never between a pair."""
    per_tile = max(MIN_TILE_ELEMENTS, math.ceil(out.elements / num_sms))
    if out.cols >= per_tile or out.cols > MAX_TILE_COLS:
        width = min(per_tile, MAX_TILE_COLS)
        width += width % 2 if pairs else 0
        return [(r, r + 1, c0, c1) for r in range(out.rows) for c0, c1 in _chunks(out.cols, width)]
    return [(r0, r1, 0, out.cols) for r0, r1 in _chunks(out.rows, max(1, per_tile // out.cols))]


def _row_blocks(out: Tensor, num_sms: int) -> list[tuple[int, int, int, int]]:
    return [(r0, r1, 0, out.cols) for r0, r1 in _chunks(out.rows, max(1, math.ceil(out.rows / num_sms)))]


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


def op_tiles(model: Model, op: Op, first_id: int, num_sms: int) -> list[Tile]:
    ts = model.tensors
    out = ts[op.output]
    ins = [ts[i] for i in op.inputs]
    esize = DTYPE_BYTES[out.dtype]
    tiles: list[Tile] = []

    def add(r0, r1, c0, c1, reads, nbytes, flops, dma=False):
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
        for r0, r1, _, _ in _row_blocks(out, num_sms):
            n = (r1 - r0) * x.cols
            reads = [Region(x.id, r0, r1, 0, x.cols)] + [Region.whole(p) for p in ins[1:]]
            add(r0, r1, 0, out.cols, reads, n * esize + (r1 - r0) * out.cols * esize, 5 * n)
    elif op.kind == "matmul":
        a, b = ins
        m, k, n = a.rows, a.cols, b.cols
        bm, bn = matmul_block(m, n, num_sms)
        for r0, r1 in _chunks(m, bm):
            for c0, c1 in _chunks(n, bn):
                reads = [Region(a.id, r0, r1, 0, k), Region(b.id, 0, k, c0, c1)]
                add(r0, r1, c0, c1, reads, ((r1 - r0) * k + k * (c1 - c0) + (r1 - r0) * (c1 - c0)) * esize,
                    2 * (r1 - r0) * (c1 - c0) * k)
    elif op.kind == "attention":
        q, k, v = ins
        s, e = q.shape[-2], q.shape[-1]
        heads, causal = op.attr("heads"), op.attr("causal", True)
        d = e // heads
        for b in range(q.rows // s):
            for h in range(heads):
                for q0, q1 in _chunks(s, ATTENTION_BLOCK):
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
    elif op.kind == "copy":
        add(0, out.rows, 0, out.cols, [Region.whole(ins[0])], 2 * out.nbytes, 0, dma=True)
    else:
        raise ValueError(f"op {op.id} has kind {op.kind!r}, which has no tiling")
    return tiles


def tile_model(model: Model, num_sms: int) -> list[Tile]:
    tiles: list[Tile] = []
    for op in model.ops:
        tiles.extend(op_tiles(model, op, len(tiles), num_sms))
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
