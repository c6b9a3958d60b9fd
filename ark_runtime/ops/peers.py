"""What the communication ops share: the checks of a peer, a tag and a World's shapes, the refusal of a rank's model
where a World is needed, and how a collective cuts a tensor's 2-D view into one share per rank."""

from __future__ import annotations

from ark_runtime.graph import ModelError, Op, Tensor
from ark_runtime.ops.spec import OpSpec

MAX_TAG = (1 << 31) - 1


def peer_of(op: str, attrs: dict, rank: int | None, world: int | None) -> int:
    peer = attrs.get("peer")
    if isinstance(peer, bool) or not isinstance(peer, int) or peer < 0:
        raise ModelError(f"{op}: peer={peer!r} must be the rank of another GPU (an int from 0)")
    if world is not None and (peer >= world or peer == rank):
        raise ModelError(f"{op}: peer={peer} must be another rank of the world's {world} (0..{world - 1}, not "
                         f"this model's rank {rank})")
    return peer


def tag_of(op: str, attrs: dict) -> int:
    tag = attrs.get("tag", 0)
    if isinstance(tag, bool) or not isinstance(tag, int) or not 0 <= tag <= MAX_TAG:
        raise ModelError(f"{op}: tag={tag!r} must be an int in 0..{MAX_TAG}")
    return tag


def needs_world(op: Op) -> ModelError:
    return ModelError(f"op {op.id} ({op.kind}) communicates with other ranks: evaluate and lower the World of every "
                      "rank's model (ark_runtime.world.World), not one rank's model alone")


def shares(rows: int, cols: int, world: int) -> list[tuple[int, int, int, int]]:
    """The world's shares of a [rows, cols] view, rank by rank, each (r0, r1, c0, c1): rows as evenly as they go
    where there are as many rows as ranks, else columns (a row vector's all-reduce); a share may be empty only when
    the view has fewer elements than ranks."""
    if rows >= world:
        return [(rows * k // world, rows * (k + 1) // world, 0, cols) for k in range(world)]
    return [(0, rows, cols * k // world, cols * (k + 1) // world) for k in range(world)]


def first_axis_share(op: str, x: Tensor, world: int) -> int:
    if x.shape[0] % world:
        raise ModelError(f"{op}: {x.name} {x.shape}: its first axis must divide into the world's {world} ranks")
    return x.shape[0] // world


class WorldOnly(OpSpec):
    """A rank's communication op: it has no reference, tiles or kernel of its own; a World replaces it by the ops
    each rank runs."""

    needs_world = True

    def reference(self, op: Op, args):
        raise needs_world(op)

    def tiles(self, tm, op: Op, v: dict) -> None:
        raise needs_world(op)

    def emit(self, e, op: Op, v: dict) -> str:
        raise needs_world(op)


def rank_attrs(attrs: dict) -> dict:
    """The rank and world Model.op gave the op (a communication op made elsewhere has none: refused)."""
    rank, world = attrs.get("rank"), attrs.get("world")
    if not isinstance(world, int) or isinstance(world, bool) or world < 2 or not isinstance(rank, int) \
            or isinstance(rank, bool) or not 0 <= rank < world:
        raise ModelError(f"a communication op is made by a model of a world (Model(name, rank=, world=)), not with "
                         f"rank={rank!r}, world={world!r}")
    return {"rank": rank, "world": world}


def device_tensor(op: str, x: Tensor) -> None:
    if x.placement != "device":
        raise ModelError(f"{op}: {x.name} is in {x.placement} memory; {op} moves GPU memory (copy it there first)")
