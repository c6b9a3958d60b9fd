"""A program across GPUs: one model per rank (`Model(name, rank=r, world=n)`, each written as SPMD code writes it,
with send, recv and collectives), joined into one graph whose ops each run on one rank and whose tensors each live
in one rank's memory:

    world = World([build(rank) for rank in range(2)])
    outs = world.evaluate([inputs0, inputs1])       # float64, every rank's tensors
    lowered = lower_world(world, DeviceSpec())      # world_plan.py: one plan, a kernel per rank

Joining replaces each communication op by what the ranks run: a send by a copy, run by the sender, into a tensor of
the receiver (its recv is that tensor); an all-reduce by each rank's reduce_peers over every rank's tensor (one
shot) or over its share, then a gather_peers of the shares (two shot); an all-gather by gather_peers; a
reduce-scatter by reduce_peers of a share. Ops read peers' tensors directly: tile dependencies (tiling.py) order a
reader after the writer of the rows it reads, wherever each runs, and a writer's next iteration after the last
readers, so communication overlaps compute as the dependencies allow, with no barrier placed by hand.

The i-th send from rank a to rank b with a tag is b's i-th recv from a with that tag; the ranks' collectives match
in the order each rank calls them. A program whose ranks wait on each other in a circle (each receiving before it
sends) is refused, naming where each rank stands.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ark_runtime.graph import DTYPE_BYTES, ModelError, Op, Tensor
from ark_runtime.model import Model
from ark_runtime.ops import spec
from ark_runtime.ops.peers import shares

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
# all_reduce "auto": one shot (each rank reads every peer's whole tensor) where it moves no more over the links
# than two shots (two GPUs), or where the tensor is this small (latency over bytes); else two shot. A default, not
# yet measured per device (bench comm will keep the crossover as data).
ALL_REDUCE_ONE_SHOT_BYTES = 256 << 10


class WorldError(ModelError):
    """A World whose ranks' models do not fit together; the message names the ranks and ops."""


def all_reduce_algorithm(nbytes: int, world: int) -> str:
    return "one_shot" if world == 2 or nbytes <= ALL_REDUCE_ONE_SHOT_BYTES else "two_shot"


@dataclass(frozen=True)
class Joined:
    """Every rank's model as one graph: `model`, whose op i runs on rank op_rank[i] and whose tensor j lives in rank
    tensor_rank[j]'s memory; ids[r] maps rank r's tensor ids to the joined model's."""

    model: Model
    op_rank: tuple[int, ...]
    tensor_rank: tuple[int, ...]
    world: int
    ids: tuple[dict[int, int], ...]
    names: tuple[str, ...]  # per rank: its model's name

    def tensor(self, rank: int, name: str) -> Tensor:
        return self.model.tensors[self.model_id(rank, name)]

    def model_id(self, rank: int, name: str) -> int:
        for t in self.model.tensors:
            if t.name == f"r{rank}.{name}":
                return t.id
        raise WorldError(f"rank {rank} has no tensor {name!r}")


def _describe(rank: int, op: Op, m: Model) -> str:
    what = op.kind
    if op.kind in ("send", "recv"):
        what += f" {'to' if op.kind == 'send' else 'from'} rank {op.attr('peer')}, tag {op.attr('tag')}"
    return f"rank {rank} at op {op.id} ({what} -> {m.tensors[op.output].name})"


class World:
    """The ranks' models of one program, models[r] being rank r's."""

    def __init__(self, models: Sequence[Model]):
        models = list(models) if isinstance(models, (list, tuple)) else models
        if not isinstance(models, list) or len(models) < 2 or not all(isinstance(m, Model) for m in models):
            raise WorldError("World takes a list of two or more Models, one per rank (Model(name, rank=r, world=n))")
        n = len(models)
        for r, m in enumerate(models):
            if m.world != n or m.rank != r:
                raise WorldError(f"model {m.name!r} at place {r} says rank={m.rank}, world={m.world}; the World's "
                                 f"models are ranks 0..{n - 1} in order, each with world={n}")
            m.check()
        if len({id(m) for m in models}) != n:
            raise WorldError("World: a model appears twice; give each rank its own")
        self.models = models
        self._joined: Joined | None = None

    @property
    def size(self) -> int:
        return len(self.models)

    def joined(self) -> Joined:
        if self._joined is None:
            self._joined = join(self.models)
        return self._joined

    def evaluate(self, inputs: Sequence[dict[str, np.ndarray]], iterations: int = 1) -> list[dict[int, np.ndarray]]:
        """Every rank's tensors (by its model's tensor ids), float64, after `iterations` runs of the program;
        `inputs[r]`: rank r's inputs by name."""
        from ark_runtime.reference import evaluate

        j = self.joined()
        values = evaluate(j.model, joined_inputs(j, inputs), iterations)
        return [{tid: values[wid] for tid, wid in j.ids[r].items()} for r in range(j.world)]


def joined_inputs(j: Joined, inputs: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if not isinstance(inputs, (list, tuple)) or len(inputs) != j.world:
        raise WorldError(f"inputs must be a list of {j.world} dicts, one per rank, not {type(inputs).__name__}")
    out = {}
    for r, given in enumerate(inputs):
        for name, value in given.items():
            out[f"r{r}.{name}"] = value
    return out


def _messages(models: list[Model]) -> dict[tuple[int, int], tuple[int, int]]:
    """Each send, (rank, op id), with its recv, (rank, op id); WorldError where the counts or shapes differ."""
    sends: dict[tuple[int, int, int], list[Op]] = {}
    recvs: dict[tuple[int, int, int], list[Op]] = {}
    for r, m in enumerate(models):
        for op in m.ops:
            if op.kind == "send":
                sends.setdefault((r, op.attr("peer"), op.attr("tag")), []).append(op)
            elif op.kind == "recv":
                recvs.setdefault((op.attr("peer"), r, op.attr("tag")), []).append(op)
    pairs = {}
    for key in sorted(set(sends) | set(recvs)):
        src, dst, tag = key
        ss, rs = sends.get(key, []), recvs.get(key, [])
        if len(ss) != len(rs):
            raise WorldError(f"rank {src} sends {len(ss)} message(s) to rank {dst} with tag {tag}, and rank {dst} "
                             f"receives {len(rs)} from rank {src} with that tag: every send needs its recv")
        for s, v in zip(ss, rs):
            x, got = models[src].tensors[s.inputs[0]], models[dst].tensors[v.output]
            if (x.shape, x.dtype) != (got.shape, got.dtype):
                raise WorldError(f"rank {src}'s send (op {s.id}) of {x.name} {x.shape} {x.dtype} to rank {dst}, tag "
                                 f"{tag}, is received by rank {dst}'s recv (op {v.id}) as {got.shape} {got.dtype}")
            pairs[(src, s.id)] = (dst, v.id)
    return pairs


def _collectives(models: list[Model]) -> list[list[Op]]:
    colls = [[op for op in m.ops if op.kind in COLLECTIVES] for m in models]
    counts = [len(c) for c in colls]
    if len(set(counts)) > 1:
        raise WorldError(f"the ranks call {counts} collectives (rank by rank): every rank calls each collective, in "
                         "the same order")
    for i in range(counts[0]):
        first = colls[0][i]
        x0 = models[0].tensors[first.inputs[0]]
        for r in range(1, len(models)):
            op = colls[r][i]
            x = models[r].tensors[op.inputs[0]]
            if op.kind != first.kind or (x.shape, x.dtype) != (x0.shape, x0.dtype) \
                    or op.attr("algorithm") != first.attr("algorithm"):
                raise WorldError(f"collective {i}: rank 0 calls {first.kind} of {x0.shape} {x0.dtype}"
                                 f"{_algo(first)}, rank {r} {op.kind} of {x.shape} {x.dtype}{_algo(op)}: the ranks' "
                                 "collectives must match in order, kind, shape and dtype")
    return colls


def _algo(op: Op) -> str:
    return f" ({op.attr('algorithm')})" if op.attr("algorithm") else ""


class _Joiner:
    def __init__(self, models: list[Model]):
        self.models = models
        self.n = len(models)
        self.out = Model(f"world-{models[0].name}")
        self.ids: list[dict[int, int]] = [{} for _ in models]
        self.op_rank: list[int] = []
        self.tensor_rank: list[int] = []

    def tensor(self, rank: int, name: str, shape, dtype: str, placement: str = "device", alias=None) -> Tensor:
        """The output of the op about to be added, in rank `rank`'s memory."""
        t = self.out._tensor(name, shape, dtype, placement, len(self.out.ops), alias)
        self.tensor_rank.append(rank)
        return t

    def add(self, rank: int, kind: str, fn: str, inputs: tuple[int, ...], out_rank: int, name: str, attrs: dict,
            alias=None) -> Tensor:
        built = spec(kind).build(fn, tuple(self.out.tensors[i] for i in inputs), dict(attrs))
        t = self.tensor(out_rank, name, built.shape, built.dtype, built.placement, alias)
        self.out.ops.append(Op(len(self.out.ops), kind, fn, inputs, t.id, tuple(sorted(built.attrs.items()))))
        self.op_rank.append(rank)
        return t

    def inputs(self) -> None:
        for r, m in enumerate(self.models):
            for t in m.tensors:
                if t.producer is None:
                    self.ids[r][t.id] = self.out._tensor(f"r{r}.{t.name}", t.shape, t.dtype, t.placement, None).id
                    self.tensor_rank.append(r)
            self.out.states += [self.ids[r][s] for s in m.states]

    def op(self, r: int, op: Op) -> None:
        m = self.models[r]
        res = m.tensors[op.output]
        inputs = tuple(self.ids[r][i] for i in op.inputs)
        alias = None if res.alias is None else self.ids[r][res.alias]
        t = self.tensor(r, f"r{r}.{res.name}", res.shape, res.dtype, res.placement, alias)
        self.out.ops.append(Op(len(self.out.ops), op.kind, op.fn, inputs, t.id, op.attrs))
        self.op_rank.append(r)
        self.ids[r][res.id] = t.id

    def send(self, r: int, op: Op, dst: int, recv: Op) -> None:
        """The send as a copy into the receiver's tensor, run by the sender."""
        got = self.models[dst].tensors[recv.output]
        t = self.add(r, "copy", "copy", (self.ids[r][op.inputs[0]],), dst, f"r{dst}.{got.name}",
                     {"placement": "device"})
        self.ids[r][op.output] = self.ids[dst][recv.output] = t.id

    def collective(self, ops: list[Op]) -> None:
        n, first = self.n, ops[0]
        xs = tuple(self.ids[r][op.inputs[0]] for r, op in enumerate(ops))
        x = self.out.tensors[xs[0]]
        outs = [self.models[r].tensors[op.output] for r, op in enumerate(ops)]
        if first.kind == "all_gather":
            rows = x.rows
            windows = tuple((p * rows, (p + 1) * rows, 0, x.cols) for p in range(n))
            for r in range(n):
                self._bind(r, ops[r], self.add(r, "gather_peers", "gather_peers", xs, r, f"r{r}.{outs[r].name}",
                                               {"shape": outs[r].shape, "windows": windows}))
        elif first.kind == "reduce_scatter":
            share = x.rows // n
            for r in range(n):
                window = (r * share, (r + 1) * share, 0, x.cols)
                self._bind(r, ops[r], self.add(r, "reduce_peers", "reduce_peers", xs, r, f"r{r}.{outs[r].name}",
                                               {"window": window, "shape": outs[r].shape}))
        else:  # all_reduce
            algorithm = first.attr("algorithm")
            if algorithm == "auto":
                algorithm = all_reduce_algorithm(x.elements * DTYPE_BYTES[x.dtype], n)
            cuts = shares(x.rows, x.cols, n)
            if algorithm == "one_shot" or any(r0 == r1 or c0 == c1 for r0, r1, c0, c1 in cuts):
                for r in range(n):
                    self._bind(r, ops[r], self.add(r, "reduce_peers", "reduce_peers", xs, r, f"r{r}.{outs[r].name}",
                                                   {}))
                return
            parts = tuple(self.add(r, "reduce_peers", "reduce_peers", xs, r, f"r{r}.{outs[r].name}.share",
                                   {"window": cuts[r]}).id for r in range(n))
            for r in range(n):
                self._bind(r, ops[r], self.add(r, "gather_peers", "gather_peers", parts, r, f"r{r}.{outs[r].name}",
                                               {"shape": x.shape, "windows": tuple(cuts)}))

    def _bind(self, r: int, op: Op, t: Tensor) -> None:
        self.ids[r][op.output] = t.id


def join(models: list[Model]) -> Joined:
    """The ranks' models as one graph (see the module's docstring); WorldError where they do not fit."""
    pairs = _messages(models)
    colls = _collectives(models)
    for r, m in enumerate(models):  # what a send names is the receiver's: nothing on the sender reads it
        sent = {op.output: op for op in m.ops if op.kind == "send"}
        for op in m.ops:
            for i in op.inputs:
                if i in sent:
                    raise WorldError(f"rank {r}'s op {op.id} ({op.kind}) reads {m.tensors[i].name}, the message its "
                                     f"send (op {sent[i].id}) puts in rank {sent[i].attr('peer')}'s memory: read the "
                                     "tensor that was sent instead")
    j = _Joiner(models)
    j.inputs()
    n = len(models)
    at = [0] * n  # per rank, its next op
    done = [0] * n  # per rank, collectives joined
    while any(at[r] < len(models[r].ops) for r in range(n)):
        moved = False
        for r in range(n):
            ops = models[r].ops
            while at[r] < len(ops):
                op = ops[at[r]]
                if op.kind == "recv":
                    if op.output not in j.ids[r]:
                        break  # its send has not been joined yet
                elif op.kind in COLLECTIVES:
                    k = done[r]
                    if not all(at[q] < len(models[q].ops) and models[q].ops[at[q]] is colls[q][k] for q in range(n)):
                        break  # not every rank has reached it yet
                    j.collective([colls[q][k] for q in range(n)])
                    for q in range(n):
                        at[q] += 1
                        done[q] += 1
                    moved = True
                    continue
                elif op.kind == "send":
                    dst, recv_id = pairs[(r, op.id)]
                    j.send(r, op, dst, models[dst].ops[recv_id])
                else:
                    j.op(r, op)
                at[r] += 1
                moved = True
        if not moved:
            stuck = [_describe(r, models[r].ops[at[r]], models[r]) for r in range(n) if at[r] < len(models[r].ops)]
            raise WorldError("the ranks wait on each other and none can go on (a recv before the send it waits for, "
                             "or a collective some rank has not reached): " + "; ".join(stuck))
    for r, m in enumerate(models):
        j.out.outputs.extend(j.ids[r][o] for o in m.outputs if j.ids[r][o] not in j.out.outputs)
    return Joined(j.out, tuple(j.op_rank), tuple(j.tensor_rank), n, tuple(j.ids), tuple(m.name for m in models))


def bytes_between(j: Joined) -> dict[tuple[int, int], int]:
    """Per (rank that runs an op, rank whose tensor it reads or writes), the bytes an iteration moves between them,
    by the ops' whole tensors (for reports)."""
    out: dict[tuple[int, int], int] = {}
    for op in j.model.ops:
        r = j.op_rank[op.id]
        for i in (*op.inputs, op.output):
            other = j.tensor_rank[i]
            if other != r:
                t = j.model.tensors[i]
                out[(r, other)] = out.get((r, other), 0) + math.prod(t.shape) * DTYPE_BYTES[t.dtype]
    return out
