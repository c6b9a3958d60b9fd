"""The plan: a model's tiles, where each runs (one resident CTA per SM, each with its instruction stream), and
the counters that order them across SMs, as plain JSON-able data.

A stream is run once per iteration, in order: `run` a tile, `signal` its counter (add one), `wait` until a
counter reaches iteration + delta. Counters only grow, so the iteration is part of the awaited value and
nothing is ever reset:
- a tile that reads what a tile on another SM writes waits for it with delta 1 (this iteration's write);
- a tile that overwrites what a tile on another SM reads waits for that reader with delta 0 (the previous
  iteration's read: the write-after-read hazard of running the model again).
Tiles on one SM are ordered by their stream and need no counter. A counter belongs to one tile; a wait on
many tiles of one op waits on an op group, whose value is the least of its tiles' counters. (Not their sum:
a sum reaches n x (i + 1) when a fast tile has signalled iteration i + 1 and a slow one not yet iteration i.)
"""

from __future__ import annotations

import bisect
import json
import pickle
from dataclasses import dataclass, field

from ark_runtime.model import Model
from ark_runtime.scheduler import DeviceSpec, Placement, place
from ark_runtime.tiling import Tile, TooManyTiles, dependencies, tile_model

PLAN_VERSION = 2  # 2: each op's kernel variant (`variants`)
# the fields a pickled plan keeps as one blob, unpickled on first use: tens of thousands of small dicts and lists that
# took half a second to load, which a Runtime started from the lowering cache does not read unless a fault or a
# profile asks (it needs their sizes only)
LAZY_FIELDS = ("tiles", "deps", "counters", "streams", "estimate")
OP_COUNTER_FROM = 5  # waits on this many tiles of one op or more go through the op's counter


class PlanError(ValueError):
    """A plan that breaks an invariant; the message lists what."""


@dataclass(frozen=True)
class Counter:
    id: int
    kind: str  # "tile": its tile signals it once per iteration; "op": a group, the least of `members`
    of: int  # the tile or op id
    members: tuple[int, ...] = ()  # for an op group: the counters of every tile of the op

    def as_json(self) -> dict:
        return {"id": self.id, "kind": self.kind, "of": self.of, "members": list(self.members)}


@dataclass
class Plan:
    model: dict  # Model.as_json()
    device: dict  # DeviceSpec.as_json()
    tiles: list[dict]  # Tile.as_json()
    deps: list[list[int]]  # per tile, the tiles it reads from (same iteration)
    counters: list[dict]
    # per SM: {"op": "run", "tile"} | {"op": "signal", "counter"} | {"op": "wait", "counter", "delta"}
    streams: list[list[dict]]
    estimate: dict = field(default_factory=dict)  # per tile SM/start/finish (ns) and the makespan, from the cost model
    variants: list[dict] = field(default_factory=list)  # per op: its kernel choice (template, block, stages, ...)
    # a World's plan (world_plan.py): {"ranks", "sms_per_rank", "op_rank", "tensor_rank"}; SM g * sms_per_rank + s
    # of the streams is SM s of rank g. Empty for one GPU's.
    world: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        out = {"version": PLAN_VERSION, "model": self.model, "device": self.device, "variants": self.variants,
               "tiles": self.tiles, "deps": self.deps, "counters": self.counters, "streams": self.streams,
               "estimate": self.estimate}
        if self.world:
            out["world"] = self.world
        return out

    def dumps(self) -> str:
        return json.dumps(self.as_json(), separators=(",", ":"))

    @staticmethod
    def from_json(data: dict) -> Plan:
        if data.get("version") != PLAN_VERSION:
            raise PlanError(f"plan version {data.get('version')!r}; this runtime reads version {PLAN_VERSION}")
        missing = {"model", "device", "variants", "tiles", "deps", "counters", "streams"} - set(data)
        if missing:
            raise PlanError(f"plan lacks {', '.join(sorted(missing))}")
        return Plan(data["model"], data["device"], data["tiles"], data["deps"], data["counters"], data["streams"],
                    data.get("estimate", {}), data["variants"], data.get("world", {}))

    @property
    def num_sms(self) -> int:
        sizes = self.__dict__.get("_sizes")
        return sizes[1] if sizes is not None else len(self.streams)

    @property
    def num_tiles(self) -> int:
        sizes = self.__dict__.get("_sizes")
        return sizes[0] if sizes is not None else len(self.tiles)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if "_blob" in state:  # still not unpickled: passed on as it came
            return state
        lazy = {k: state.pop(k) for k in LAZY_FIELDS}
        state["_blob"] = pickle.dumps(lazy, protocol=pickle.HIGHEST_PROTOCOL)
        state["_sizes"] = (len(lazy["tiles"]), len(lazy["streams"]))
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __getattr__(self, name: str):  # reached only for what __dict__ lacks: a lazy field not yet unpickled
        blob = self.__dict__.get("_blob") if name in LAZY_FIELDS else None
        if blob is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.__dict__.update(pickle.loads(blob))
        self.__dict__.pop("_blob", None)  # (pop: two threads may both have found it)
        self.__dict__.pop("_sizes", None)
        return self.__dict__[name]

    def stats(self) -> dict:
        waits = sum(1 for s in self.streams for i in s if i["op"] == "wait")
        return {"tiles": len(self.tiles), "ops": len(self.model["ops"]), "sms": self.num_sms,
                "sms_used": sum(1 for s in self.streams if any(i["op"] == "run" for i in s)),
                "counters": len(self.counters), "waits": waits,
                "makespan_us": round(self.estimate.get("makespan_ns", 0.0) / 1e3, 3)}


def _streams(tiles: list[Tile], deps: list[tuple[int, ...]],
             placement: Placement) -> tuple[list[Counter], list[list[dict]]]:
    sm = placement.sm
    n_sms = max(sm, default=0) + 1
    op_tiles: dict[int, list[int]] = {}
    for t in tiles:
        op_tiles.setdefault(t.op, []).append(t.id)
    readers: list[list[int]] = [[] for _ in tiles]
    for t, ds in enumerate(deps):
        for p in ds:
            readers[p].append(t)

    counters: list[Counter] = []
    tile_counter: dict[int, int] = {}
    op_counter: dict[int, int] = {}

    def counter_for(kind: str, of: int) -> int:
        table = tile_counter if kind == "tile" else op_counter
        if of not in table:
            members = tuple(counter_for("tile", t) for t in op_tiles[of]) if kind == "op" else ()
            table[of] = len(counters)
            counters.append(Counter(len(counters), kind, of, members))
        return table[of]

    # what each SM has already waited for in this iteration (counters only grow: a wait stays true), and per op how
    # many of its tiles it waited for one by one (none: no tile of the op needs looking up)
    seen_tile: list[dict[int, int]] = [{} for _ in range(n_sms)]
    seen_op: list[dict[int, int]] = [{} for _ in range(n_sms)]
    tile_waits: list[dict[int, int]] = [{} for _ in range(n_sms)]
    op_of = [t.op for t in tiles]
    if any(t.id != i for i, t in enumerate(tiles)) or any(a > b for a, b in zip(op_of, op_of[1:])):
        raise PlanError("tiles must be numbered in order and come op by op (as tile_model makes them)")
    op_end = {t.op: t.id + 1 for t in tiles}  # one past each op's last tile: an op's tiles are consecutive ids

    def waits_for(s: int, others: list[int], delta: int) -> list[dict]:
        """Waits on SM s for the `others` (tiles on other SMs, ascending) not already waited for there: per op, one op
        counter when there are many of its tiles, else one counter per tile."""
        ops_seen, tiles_seen, counted = seen_op[s], seen_tile[s], tile_waits[s]
        out = []
        i, n = 0, len(others)
        while i < n:
            op = op_of[others[i]]
            j = bisect.bisect_left(others, op_end[op], i)
            if ops_seen.get(op, -1) < delta:  # an op group waited for covers every tile of the op
                ids = others[i:j]
                if counted.get(op):
                    ids = [o for o in ids if tiles_seen.get(o, -1) < delta]
                if len(ids) >= OP_COUNTER_FROM:
                    out.append({"op": "wait", "counter": counter_for("op", op), "delta": delta})
                    ops_seen[op] = max(delta, ops_seen.get(op, -1))
                else:
                    for o in ids:
                        out.append({"op": "wait", "counter": counter_for("tile", o), "delta": delta})
                        if o not in tiles_seen:
                            counted[op] = counted.get(op, 0) + 1
                        tiles_seen[o] = max(delta, tiles_seen.get(o, -1))
            i = j
        return out

    streams: list[list[dict]] = [[] for _ in range(n_sms)]
    body: dict[int, list[dict]] = {}
    for t in tiles:  # in each SM's stream order
        s = sm[t.id]
        raw = [p for p in deps[t.id] if sm[p] != s]
        war = [r for r in readers[t.id] if sm[r] != s]
        body[t.id] = waits_for(s, raw, 1) + waits_for(s, war, 0)
    # a tile signals its own counter, if anything waits on it (alone or in its op's group)
    for t in tiles:
        s = streams[sm[t.id]]
        s.extend(body[t.id])
        s.append({"op": "run", "tile": t.id})
        if t.id in tile_counter:
            s.append({"op": "signal", "counter": tile_counter[t.id]})
    return counters, streams


def choose_variants(model: Model, device: DeviceSpec, overrides: dict[int, dict] | None = None,
                    knobs: dict[int, dict] | None = None) -> list[dict]:
    """Each op's kernel choice, made once by its spec (ark_runtime/ops/); `knobs` (per op id) set some of a spec's
    choices (a tuner's candidates: OpSpec.knobs), `overrides` (per op id) what is chosen outside the op, as a copy's
    path."""
    from ark_runtime.ops import spec

    out = []
    for op in model.ops:
        given = (knobs or {}).get(op.id)
        v = spec(op.kind).tuned(model, op, device, given) if given else spec(op.kind).variant(model, op, device)
        v.update((overrides or {}).get(op.id, {}))
        out.append(v)
    return out


def build_plan(model: Model, device: DeviceSpec | None = None, placement: str = "cost",
               sm_copies: frozenset[int] = frozenset(), variants: list[dict] | None = None) -> Plan:
    """Tiles, their placement (scheduler.PLACEMENTS) and the streams with their counters; raises PlanError if
    an invariant fails. `variants`: each op's kernel choice (choose_variants' unless given; `sm_copies`, the copy ops
    the CTAs move themselves, cut into tiles over the SMs: every other copy is one tile that posts a DMA)."""
    from ark_runtime.plan_check import check_for_planning

    device = device or DeviceSpec()
    if not model.ops:
        raise PlanError(f"model {model.name!r} has no ops to plan")
    if variants is None:
        variants = choose_variants(model, device, {op: {"path": "sm"} for op in sm_copies})
    try:
        tiles = tile_model(model, device.num_sms, device.wgmma, variants)
    except TooManyTiles as exc:
        raise PlanError(f"model {model.name!r}: {exc}") from None
    deps = dependencies(model, tiles)
    try:
        where = place(tiles, deps, device, placement)
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    counters, streams = _streams(tiles, deps, where)
    streams += [[] for _ in range(device.num_sms - len(streams))]
    plan = Plan(model.as_json(), device.as_json(), [t.as_json() for t in tiles], [list(d) for d in deps],
                [c.as_json() for c in counters], streams,
                {"placement": placement, "sm": list(where.sm), "start_ns": list(where.start_ns),
                 "finish_ns": list(where.finish_ns), "makespan_ns": where.makespan_ns}, variants)
    problems = check_for_planning(plan)
    if problems:
        raise PlanError(f"the plan of {model.name!r} breaks {len(problems)} invariant(s): " + "; ".join(problems[:5]))
    return plan
