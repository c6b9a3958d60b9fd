"""A World lowered: one plan over every rank's SMs, and each rank's kernel and instruction arrays.

    lowered = lower_world(World(models), DeviceSpec(num_sms=132))
    lowered.plan            # the World's plan: SM g * num_sms + s of its streams is SM s of rank g
    lowered.ranks[r]        # rank r's kernel source and program arrays

Each rank's model is rewritten as one GPU's is (fusion, split-K: lower.rewrite), then the ranks are joined (world.py)
and planned as one graph: tiles are cut by their ops' specs, dependencies found between tiles wherever they run,
each tile placed on an SM of the rank that runs its op (scheduler.place with groups), and the counters and streams
made as for one GPU. So the plan's invariants and its deadlock check (plan_check.py), and the float64 run tile by
tile (reference.run_plan), hold across ranks as they do across SMs.

Every rank keeps a copy of every counter (the counter arrays are the World's, one per rank); a wait reads its own
rank's copy, and a tile's signal adds to its rank's copy and to the copies of the ranks that wait on it (its push
mask: program.py's signal instruction). A copy into a peer's memory takes the SM path unless
LowerOptions.copy_paths names another.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ark_runtime.kernel.codegen import KernelSource, generate
from ark_runtime.kernel.program import ProgramArrays, build_program
from ark_runtime.lower import LowerError, LowerOptions, rewrite
from ark_runtime.model import ModelError
from ark_runtime.plan import Plan, PlanError, _streams, choose_variants
from ark_runtime.plan_check import check_for_planning
from ark_runtime.scheduler import DeviceSpec, place
from ark_runtime.tiling import TooManyTiles, dependencies, tile_model
from ark_runtime.world import Joined, World, WorldError, join

PEER_SYNC_NS = 2000.0  # a wait on a tile of another GPU, beyond a cross-SM one: the cost model's guess, unmeasured


@dataclass(frozen=True)
class LoweredRank:
    rank: int
    source: KernelSource
    program: ProgramArrays
    copy_paths: dict[int, str] = field(default_factory=dict)  # per copy op this rank runs: "sm", "engine", "graph"


@dataclass(frozen=True)
class LoweredWorld:
    world: World
    joined: Joined  # the ranks' models as run (rewritten), joined
    device: DeviceSpec
    options: LowerOptions
    plan: Plan
    ranks: tuple[LoweredRank, ...]
    push: dict[int, int]  # per counter, the mask of other ranks its signals reach


def rank_of_sm(plan: Plan, sm: int) -> int:
    return sm // plan.world["sms_per_rank"]


def push_masks(plan: Plan) -> dict[int, int]:
    """Per counter, the ranks other than its tile's that wait on it (through an op group too), as a bit mask."""
    tile_rank = {}
    for s, stream in enumerate(plan.streams):
        for ins in stream:
            if ins["op"] == "run":
                tile_rank[ins["tile"]] = rank_of_sm(plan, s)
    waiting: dict[int, set[int]] = {}
    counters = plan.counters
    for s, stream in enumerate(plan.streams):
        r = rank_of_sm(plan, s)
        for ins in stream:
            if ins["op"] == "wait":
                c = counters[ins["counter"]]
                for k in (c["members"] if c["kind"] == "op" else (c["id"],)):
                    waiting.setdefault(k, set()).add(r)
    masks = {}
    for c in counters:
        if c["kind"] != "tile":
            continue
        others = waiting.get(c["id"], set()) - {tile_rank[c["of"]]}
        if others:
            masks[c["id"]] = sum(1 << r for r in others)
    return masks


def world_problems(plan: Plan, push: dict[int, int]) -> list[str]:
    """What only a World's plan can break: a tile on an SM of a rank that does not run its op; a wait on a counter
    whose tile runs on another rank that the counter's signal does not reach."""
    problems = []
    op_rank, per = plan.world["op_rank"], plan.world["sms_per_rank"]
    tile_rank = {}
    for s, stream in enumerate(plan.streams):
        for ins in stream:
            if ins["op"] == "run":
                t = plan.tiles[ins["tile"]]
                tile_rank[t["id"]] = s // per
                if op_rank[t["op"]] != s // per:
                    problems.append(f"tile {t['id']} of op {t['op']} (rank {op_rank[t['op']]}) runs on SM {s % per} "
                                    f"of rank {s // per}")
    counters = plan.counters
    for s, stream in enumerate(plan.streams):
        r = s // per
        for ins in stream:
            if ins["op"] != "wait":
                continue
            c = counters[ins["counter"]]
            for k in (c["members"] if c["kind"] == "op" else (c["id"],)):
                owner = tile_rank[counters[k]["of"]]
                if owner != r and not push.get(k, 0) >> r & 1:
                    problems.append(f"rank {r} waits on counter {k} of tile {counters[k]['of']} (rank {owner}), "
                                    "whose signal does not reach it")
    return problems


def _copy_paths(j: Joined, options: LowerOptions) -> dict[int, str]:
    wanted = dict(options.copy_paths)
    paths = {}
    for op in j.model.ops:
        if op.kind == "copy":
            name = j.model.tensors[op.output].name
            peer = j.tensor_rank[op.output] != j.op_rank[op.id]
            paths[op.id] = wanted.get(name, "sm" if peer else "engine")
    unknown = sorted(set(wanted) - {j.model.tensors[j.model.ops[op].output].name for op in paths})
    if unknown:
        raise LowerError(f"copy_paths names {', '.join(unknown)}, which no copy op of the World writes (name copies "
                         "as the World does: r<rank>.<tensor>)")
    return paths


def lower_world(world: World, device: DeviceSpec | None = None, options: LowerOptions = LowerOptions(),
                peer_sync_ns: float = PEER_SYNC_NS) -> LoweredWorld:
    """The World's plan and each rank's kernel (see the module's docstring); LowerError naming what cannot be
    lowered."""
    if not isinstance(world, World):
        raise LowerError(f"lower_world takes a World, not {type(world).__name__}")
    device = device or DeviceSpec()
    if options.knobs:
        raise LowerError("knobs name ops of one model; a World's lowering takes none yet")
    try:
        world.joined()  # the ranks fit together as written (errors name the ops the user wrote)
        j = join([rewrite(m, device, options) for m in world.models])
        paths = _copy_paths(j, options)
        variants = choose_variants(j.model, device, {op: {"path": p} for op, p in paths.items()})
        tiles = tile_model(j.model, device.num_sms, device.wgmma, variants)
    except (WorldError, ModelError, TooManyTiles) as exc:
        raise LowerError(str(exc)) from None
    deps = dependencies(j.model, tiles)
    n, per = j.world, device.num_sms
    where = place(tiles, deps, device, options.placement, [j.op_rank[t.op] for t in tiles], n, peer_sync_ns)
    counters, streams = _streams(tiles, deps, where)
    streams += [[] for _ in range(n * per - len(streams))]
    plan = Plan(j.model.as_json(), device.as_json(), [t.as_json() for t in tiles], [list(d) for d in deps],
                [c.as_json() for c in counters], streams,
                {"placement": options.placement, "sm": list(where.sm), "start_ns": list(where.start_ns),
                 "finish_ns": list(where.finish_ns), "makespan_ns": where.makespan_ns}, variants,
                {"ranks": n, "sms_per_rank": per, "op_rank": list(j.op_rank), "tensor_rank": list(j.tensor_rank)})
    push = push_masks(plan)
    problems = check_for_planning(plan) or world_problems(plan, push)
    if problems:
        raise LowerError(f"the World's plan breaks {len(problems)} invariant(s): " + "; ".join(problems[:5]))
    ranks = []
    for r in range(n):
        mine = frozenset(op.id for op in j.model.ops if j.op_rank[op.id] == r)
        graph = any(p == "graph" for op, p in paths.items() if op in mine)
        try:
            source = generate(j.model, plan, graph_copies=graph, rank_ops=mine, world=n)
        except (PlanError, ModelError) as exc:
            raise LowerError(f"rank {r}: {exc}") from None
        program = build_program(plan, source.op_cases, plan.streams[r * per:(r + 1) * per], push)
        ranks.append(LoweredRank(r, source, program, {op: p for op, p in paths.items() if op in mine}))
    return LoweredWorld(world, j, device, options, plan, tuple(ranks), push)
