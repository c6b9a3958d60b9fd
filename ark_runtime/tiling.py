"""Ops cut into tiles (vCTAs): each tile writes one region of its op's output and reads regions of its inputs,
in the 2-D view of every tensor (all axes but the last folded into rows). A tile depends on the tiles of
earlier ops whose written regions its reads overlap; regions that broadcast or gather (embedding rows,
norm weights) are read whole, which can only add dependencies, never lose one. Each op's spec (ark_runtime/ops/)
cuts its own ops, through a TileMaker, in the shape its variant chose."""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass

from ark_runtime.graph import DTYPE_BYTES, Op, Tensor


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


def count(n: int) -> int:
    """`n`, the tiles about to be made, if a plan may have them; checked before they are made."""
    if n > MAX_TILES:
        raise TooManyTiles(f"{n:,} tiles")
    return n


def chunks(n: int, size: int) -> list[tuple[int, int]]:
    count(-(-n // size))
    return [(i, min(i + size, n)) for i in range(0, n, size)]


OFF = ("0", "off", "no", "false")  # what an ARK_* switch in the environment takes for off (any case, spaces around)


def switched_off(name: str) -> bool:
    """Whether environment variable `name` turns its switch off (unset: on)."""
    return os.environ.get(name, "").strip().lower() in OFF


class TileMaker:
    """Where an op spec puts its op's tiles: `add` one region of the output at a time, in the order the schedule
    should deal them out."""

    def __init__(self, model, op: Op, first_id: int, num_sms: int, wgmma: bool):
        self.model, self.op, self.num_sms, self.wgmma = model, op, num_sms, wgmma
        self.out: Tensor = model.tensors[op.output]
        self.ins: list[Tensor] = [model.tensors[i] for i in op.inputs]
        self.esize = DTYPE_BYTES[self.out.dtype]
        self.first_id = first_id
        self.tiles: list[Tile] = []

    def add(self, r0: int, r1: int, c0: int, c1: int, reads, nbytes: int, flops: int, dma: bool = False) -> None:
        count(self.first_id + len(self.tiles) + 1)
        self.tiles.append(Tile(self.first_id + len(self.tiles), self.op.id, len(self.tiles),
                               Region(self.out.id, r0, r1, c0, c1), tuple(reads), nbytes, flops, dma))


def tile_model(model, num_sms: int, wgmma: bool = True, variants: list[dict] | None = None) -> list[Tile]:
    """Every op's tiles, in op order, each op cut by its spec as its variant says (plan.choose_variants' unless
    given); TooManyTiles, naming the op, where the plan would pass MAX_TILES."""
    from ark_runtime.ops import spec

    if variants is None:
        from ark_runtime.plan import choose_variants
        from ark_runtime.scheduler import DeviceSpec

        variants = choose_variants(model, DeviceSpec(num_sms=num_sms, wgmma=wgmma))
    tiles: list[Tile] = []
    for op in model.ops:
        tm = TileMaker(model, op, len(tiles), num_sms, wgmma)
        try:
            spec(op.kind).tiles(tm, op, variants[op.id])
        except TooManyTiles as exc:
            out = model.tensors[op.output]
            raise TooManyTiles(f"op {op.id} ({op.kind} -> {out.name}, shape {out.shape}) would take the plan to {exc}, "
                               f"past the {MAX_TILES:,} a plan may have ({len(tiles):,} before it): make its "
                               "tensors smaller, or the model fewer ops") from None
        tiles.extend(tm.tiles)
    return tiles


def dependencies(model, tiles: list[Tile]) -> list[tuple[int, ...]]:
    """For each tile, the tiles of earlier ops it must follow in an iteration: those whose written regions its reads
    overlap and, where it writes a state in place (Tensor.alias), those of earlier ops that read or write what it
    overwrites. Regions are compared on the memory they are (a tensor's root: a state and every op output that
    writes it are one). The plan orders each pair both ways across iterations (plan.py: the later waits the earlier
    in the iteration, the earlier waits the later's previous iteration), so no order between the ops of two
    iterations is lost."""
    root = [t.root for t in model.tensors]
    by_tensor: dict[int, list[Tile]] = {}
    for t in tiles:
        by_tensor.setdefault(root[t.writes.tensor], []).append(t)
    starts: dict[int, list[int]] = {}
    for k, v in by_tensor.items():  # each tensor's writers sorted by first row, for the bisect below
        order = sorted(range(len(v)), key=lambda i: v[i].writes.r0)
        by_tensor[k] = [v[i] for i in order]
        starts[k] = [v[i].writes.r0 for i in order]
    boxes = {k: [(w.writes.r1, w.writes.c0, w.writes.c1, w.id, w.op) for w in v] for k, v in by_tensor.items()}
    states = set(getattr(model, "states", ()))
    accessed: dict[int, list[tuple[Region, int, int]]] = {}  # per state: (region, tile, op) of every read and write
    deps = []
    for t in tiles:
        found: set[int] = set()
        for g in t.reads:
            r = root[g.tensor]
            hi = bisect.bisect_left(starts.get(r, ()), g.r1)  # writers from a row below the read's end
            r0, c0, c1 = g.r0, g.c0, g.c1
            found.update(w for wr1, wc0, wc1, w, op in boxes.get(r, ())[:hi]
                         if wr1 > r0 and wc0 < c1 and c0 < wc1 and op < t.op)
        target = root[t.writes.tensor]
        if target in states:  # an in-place write: after what earlier ops read or wrote there
            mine = Region(target, t.writes.r0, t.writes.r1, t.writes.c0, t.writes.c1)
            found.update(w for g, w, op in accessed.get(target, ()) if op < t.op and g.overlaps(mine))
        for g in t.reads:
            if root[g.tensor] in states:
                accessed.setdefault(root[g.tensor], []).append(
                    (Region(root[g.tensor], g.r0, g.r1, g.c0, g.c1), t.id, t.op))
        if target in states:
            accessed.setdefault(target, []).append((Region(target, t.writes.r0, t.writes.r1, t.writes.c0, t.writes.c1),
                                                    t.id, t.op))
        deps.append(tuple(sorted(found)))
    return deps
