"""The Worlds `arkdma bench comm` times, each with its inputs and what it must compute: a ping-pong of puts, a pair
of all-reduces, a burst of puts, and a matmul loop with or without an all-reduce beside it. Plain models: built,
joined, lowered and evaluated without a GPU (tests/unit/test_bench_comm.py).

Why these shapes. A loop kernel runs iteration after iteration with no barrier between them: a tile of the next
iteration waits only for what it reads and for the last readers of what it overwrites (plan.py). So a timed thing
must depend on the one before it across iterations too, or the iterations overlap and the time per iteration is a
throughput, not a latency. A ping-pong does: rank 0 puts x into rank 1's buffer, rank 1 puts what it received back,
and rank 0's next put overwrites the buffer rank 1's put-back read, so it waits for it: one round trip an iteration,
one way half of it. (Several round trips an iteration would not be: the next iteration's first put waits only for
the first put-back.) Likewise two all-reduces an iteration, the second of the first's result: the next iteration's
first overwrites what the second read on both GPUs, so each waits on the other GPU's last one, as a layer's
all-reduce waits on what the peer's layer computed; one all-reduce is half the iteration. (One alone would read an
input nobody writes and wait on nothing; a longer chain would overlap its iterations.) Inputs are small integers
times a power of two, so every sum is exact in bf16 and each result is checked bit for bit."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ark_runtime.graph import DTYPE_BYTES
from ark_runtime.model import Model
from ark_runtime.world import World

MAX_COLS = 4096  # a message's row: big messages are [rows, 4096], so the SMs copy them in row blocks
WORLD = 2


class CommWorldError(ValueError):
    """A size or count the benchmark's Worlds cannot take; the message says what fits."""


@dataclass(frozen=True)
class Bench:
    """A World to time, its inputs (per rank, by name), and what each rank's outputs must be (per rank, by name:
    exact values), with how many of the timed thing one iteration holds."""

    world: World
    inputs: list[dict[str, np.ndarray]]
    want: list[dict[str, np.ndarray]]
    per_iteration: int  # one-way puts, all-reduces, bursts ... in one iteration
    detail: dict


def shape_for(nbytes: int, dtype: str) -> tuple[int, ...]:
    """A message of `nbytes` as a tensor of `dtype`: one row up to MAX_COLS elements, else rows of MAX_COLS."""
    size = DTYPE_BYTES[dtype]
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < size or nbytes % size:
        raise CommWorldError(f"{nbytes!r} bytes is not a whole number of {dtype} elements ({size} bytes each)")
    n = nbytes // size
    if n <= MAX_COLS:
        return (n,)
    if n % MAX_COLS:
        raise CommWorldError(f"{nbytes} bytes: above {MAX_COLS * size} bytes a message is rows of {MAX_COLS} {dtype} "
                             f"elements; give a multiple of {MAX_COLS * size} bytes")
    return (n // MAX_COLS, MAX_COLS)


def pattern(shape: tuple[int, ...], offset: int = 0, scale: float = 1.0) -> np.ndarray:
    """Small integers (-4..3, moved by `offset`) times `scale` (a power of two): exact in bf16 and their sums too."""
    base = ((np.arange(8) - 4 + offset) * scale).astype(np.float32)
    n = int(np.prod(shape))
    return np.tile(base, -(-n // 8))[:n].reshape(shape)


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CommWorldError(f"{name}={value!r} must be a positive int")
    return value


def ping_pong(nbytes: int, dtype: str = "fp32") -> Bench:
    """Rank 0 puts x to rank 1, which puts what it received back to rank 0: one round trip an iteration, each waiting
    for the last (see the module's docstring); rank 0 ends with x."""
    shape = shape_for(nbytes, dtype)
    models = []
    for r in range(WORLD):
        m = Model("ping-pong", rank=r, world=WORLD)
        if r == 0:
            m.send(m.input("x", shape, dtype), 1, tag=0)
            m.output(m.recv(shape, dtype, 1, tag=1))
        else:
            got = m.recv(shape, dtype, 0, tag=0)
            m.send(got, 0, tag=1)
            m.output(got)
        models.append(m)
    x0 = pattern(shape)
    want = [{models[0].tensors[models[0].outputs[0]].name: x0}, {models[1].tensors[models[1].outputs[0]].name: x0}]
    return Bench(World(models), [{"x": x0}, {}], want, 2, {"round_trips_per_iteration": 1, "dtype": dtype,
                                                          "shape": list(shape)})


CHAIN = 2  # all-reduces an iteration (the module's docstring says why two)


def all_reduce_pair(nbytes: int, dtype: str = "bf16") -> Bench:
    """Two all-reduces an iteration, the second of the first's result; rank r's x is pattern(offset=r) / 4, so the
    result is (x_0 + x_1) 2, exact."""
    shape = shape_for(nbytes, dtype)
    scale = 2.0 ** -CHAIN
    models = []
    for r in range(WORLD):
        m = Model("all-reduce", rank=r, world=WORLD)
        x = m.input("x", shape, dtype)
        for _ in range(CHAIN):
            x = m.all_reduce(x)
        m.output(x)
        models.append(m)
    xs = [pattern(shape, r, scale) for r in range(WORLD)]
    total = (xs[0] + xs[1]) * np.float32(2.0 ** (CHAIN - 1))  # exact in float32 as in bf16
    want = [{m.tensors[m.outputs[0]].name: total} for m in models]
    return Bench(World(models), [{"x": x} for x in xs], want, CHAIN, {"chain": CHAIN, "dtype": dtype,
                                                                      "shape": list(shape)})


def put_burst(count: int, nbytes: int, dtype: str = "fp32") -> Bench:
    """Rank 0 puts the same x to rank 1 `count` times an iteration (tags 0..count-1), back to back; rank 1 keeps each
    (nothing on it reads them, so nothing holds rank 0's next iteration back: its time per iteration is the rate at
    which it puts, a throughput by design)."""
    _positive("count", count)
    shape = shape_for(nbytes, dtype)
    models = []
    for r in range(WORLD):
        m = Model("put-burst", rank=r, world=WORLD)
        if r == 0:
            x = m.input("x", shape, dtype)
            for j in range(count):
                m.send(x, 1, tag=j)
            m.output(m.unary("identity", x))
        else:
            for j in range(count):
                m.output(m.recv(shape, dtype, 0, tag=j))
        models.append(m)
    x0 = pattern(shape)
    want = [{models[0].tensors[models[0].outputs[0]].name: x0},
            {models[1].tensors[o].name: x0 for o in models[1].outputs}]
    return Bench(World(models), [{"x": x0}, {}], want, 1, {"puts": count, "dtype": dtype, "shape": list(shape)})


OVERLAP_PARTS = ("compute", "comm", "both")


def overlap(part: str, matmul_n: int, matmuls: int, nbytes: int, dtype: str = "bf16") -> Bench:
    """Each rank: `matmuls` bf16 n x n x n matmuls (independent, as a loop of them), and/or one all-reduce of
    `nbytes` that reads no matmul's result, so the two can run side by side. `part`: "compute", "comm" or "both"."""
    if part not in OVERLAP_PARTS:
        raise CommWorldError(f"part {part!r} is not one of {', '.join(OVERLAP_PARTS)}")
    _positive("matmul_n", matmul_n)
    _positive("matmuls", matmuls)
    shape = shape_for(nbytes, dtype)
    scale = 0.5
    models, inputs, want = [], [], []
    a = pattern((matmul_n, matmul_n), 0, 1 / 64)
    b = pattern((matmul_n, matmul_n), 1, 1 / 64)
    for r in range(WORLD):
        m = Model(f"overlap-{part}", rank=r, world=WORLD)
        values: dict[str, np.ndarray] = {}
        outs: dict[str, np.ndarray] = {}
        if part != "comm":
            ta, tb = m.input("a", (matmul_n, matmul_n), dtype), m.input("b", (matmul_n, matmul_n), dtype)
            values.update(a=a, b=b)
            for _ in range(matmuls):
                m.output(m.matmul(ta, tb))
        if part != "compute":
            values["x"] = pattern(shape, r, scale)
            m.output(m.all_reduce(m.input("x", shape, dtype)))
            outs[m.tensors[m.outputs[-1]].name] = pattern(shape, 0, scale) + pattern(shape, 1, scale)
        models.append(m)
        inputs.append(values)
        want.append(outs)
    return Bench(World(models), inputs, want, 1, {"part": part, "matmul_n": matmul_n, "matmuls": matmuls,
                                                   "dtype": dtype, "shape": list(shape)})


def mismatches(bench: Bench, got: list[dict[str, np.ndarray]]) -> list[str]:
    """Where a rank's output differs from what it must be (exactly: every value and sum is exact in float32 as in
    bf16), one line each."""
    out = []
    for r, want in enumerate(bench.want):
        for name, value in want.items():
            have = np.asarray(got[r][name], np.float32).reshape(value.shape)
            bad = np.flatnonzero(have != value)
            if bad.size:
                i = int(bad[0])
                out.append(f"rank {r}'s {name}: {bad.size} of {value.size} elements differ, the first at {i}: "
                           f"{have.reshape(-1)[i]!r} for {value.reshape(-1)[i]!r}")
    return out
