"""`arkdma bench loop`: the loop-kernel runtime beside PyTorch on the same GPU, with the same inputs, every
case checked against PyTorch's result.

Cases (as the runtime issue names them): a) 64 elementwise ops chained on a 1 MiB fp32 tensor; b) MLP
4096 -> 16384 -> 4096 bf16 at batch 1, 8, 64; c) a pre-LN transformer block (hidden 1024, 16 heads, bf16,
batch 1) at sequence 128 and 512; d) 1,000 dependent one-tile tasks placed round-robin on two SMs (every
edge a cross-SM wait); e) one 8192^3 bf16 matmul; f) 8 KiB and 1 MiB copied GPU -> pinned host from inside
the running kernel, per path.

arkdma: the model bound to PyTorch's own tensors (DLPack, no copy) and launched once; `run(n)` queues n
iterations and the GPU clock stamps when each is done, so `arkdma_us` is the median gap between consecutive
stamps (p10 and p90 beside it): time per iteration with no host on the path. `roundtrip_us` is one
`run(1)` + `wait()` from Python, host signalling included (median of `roundtrips` after `roundtrip_warmup`, by
perf_counter; p10 and p90 beside it).
PyTorch: `eager_us` (CUDA events over `reps` calls after warm-up, per call), `graph_us` (one call captured in
a CUDA graph, replayed), `compile_us` (torch.compile's code, captured in a CUDA graph and replayed), each
measured in the same run on the same GPU. `graph_roundtrip_us` is the host's round trip for that CUDA graph,
timed as arkdma's is: one replay + `torch.cuda.synchronize()`, as many samples after as many warm-ups, median and
p10/p90; `roundtrip_ratio` = roundtrip_us / graph_roundtrip_us. The host's own share of each round trip:
`host_us` = roundtrip_us - arkdma_us and `graph_host_us` = graph_roundtrip_us - graph_us (what is left once each
side's GPU time is taken out), so a case where PyTorch's kernel is faster does not hide how the host paths compare.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ark_runtime import models
from ark_runtime.kernel.codes import RING
from ark_runtime.model import Model
from bench.timing import (RoundTrips, cuda_graph, events_us, graph_round_trips, graph_us, iteration_us, reps_for,
                          round_trips)

CASES = ("a", "b", "c", "d", "e", "f")
TOL = {"fp32": 1e-3, "fp16": 2e-2, "bf16": 6e-2}  # of the output's scale, as the GPU tests


@dataclass(frozen=True)
class LoopConfig:
    cases: tuple[str, ...] = CASES
    compile: bool = True  # torch.compile baselines (each compiles for a while)
    reps: int = 50  # PyTorch calls per timing
    samples: int = 5  # timings per figure (median reported)
    quick: bool = False  # smaller shapes: a smoke run
    roundtrips: int = 200  # host round trips timed per figure (arkdma's run(1) + wait(); a graph's replay + sync)
    roundtrip_warmup: int = 20  # round trips before the timed ones


@dataclass
class Row:
    case: str
    model: str
    arkdma_us: float
    arkdma_p10_us: float
    arkdma_p90_us: float
    roundtrip_us: float
    eager_us: float | None
    graph_us: float | None
    compile_us: float | None
    ratio_to_best_torch: float | None  # arkdma_us / the best PyTorch figure
    max_rel_err: float  # arkdma against PyTorch eager, of the output's scale
    ok: bool
    path: str | None = None  # copies: how the kernel moved the bytes
    copy_us: float | None = None  # copies: the copy op alone, by the GPU clock
    per_edge_us: float | None = None  # case d: per dependency edge
    roundtrip_p10_us: float | None = None
    roundtrip_p90_us: float | None = None
    graph_roundtrip_us: float | None = None  # one replay of PyTorch's CUDA graph + torch.cuda.synchronize()
    graph_roundtrip_p10_us: float | None = None
    graph_roundtrip_p90_us: float | None = None
    roundtrip_ratio: float | None = None  # roundtrip_us / graph_roundtrip_us
    host_us: float | None = None  # roundtrip_us - arkdma_us: the host's share of arkdma's round trip
    graph_host_us: float | None = None  # graph_roundtrip_us - graph_us: the host's share of the graph's
    go_path: str | None = None  # how run() handed `go` to the kernel (Runtime.go_path)
    go_writes: dict | None = None  # of the case's runs, how many wrote `go` on the GPU and how many from the host
    notes: list[str] = field(default_factory=list)
    profile: dict | None = None  # Runtime.profile() of the last iteration: time per op and per SM


@dataclass
class LoopResult:
    device: str
    torch: str
    rows: list[Row]
    complete: bool = True  # False while cases remain: a run cut short still leaves the rows it measured

    def as_json(self) -> dict:
        return {"device": self.device, "torch": self.torch, "complete": self.complete,
                "rows": [asdict(r) for r in self.rows]}


def _torch_dtype(torch, dtype: str):
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]


def _inputs(torch, model: Model, seed: int = 0) -> dict:
    """Standard normal inputs on the GPU; a matmul's weights scaled by 1/sqrt(fan-in), as a model's are."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    weights = {o.inputs[1] for o in model.ops if o.kind == "matmul"}
    out = {}
    for t in model.tensors:
        if t.producer is None:
            v = torch.randn(t.shape, generator=g, device="cuda", dtype=torch.float32)
            if t.id in weights:
                v /= math.sqrt(t.rows)
            out[t.name] = v.to(_torch_dtype(torch, t.dtype))
    return out


# --- the PyTorch programs, written from each model's definition in ark_runtime/models.py ------------------
def _gelu(torch, x):
    return torch.nn.functional.gelu(x, approximate="tanh")


def _chain_fn(torch, ops: int) -> Callable:
    f = torch.nn.functional
    table = {"neg": torch.neg, "relu": torch.relu, "silu": f.silu, "gelu": lambda x: _gelu(torch, x)}

    def run(x):
        for i in range(ops):
            x = table[models.CHAIN_FNS[i % len(models.CHAIN_FNS)]](x)
        return x
    return run


def _block_fn(torch, heads: int) -> Callable:
    f = torch.nn.functional

    def run(x, ln1_w, ln1_b, ln2_w, ln2_b, wq, wk, wv, wo, w1, w2):
        s, e = x.shape
        h = f.layer_norm(x, (e,), ln1_w, ln1_b, 1e-5)
        q, k, v = ((h @ w).view(1, s, heads, e // heads).transpose(1, 2) for w in (wq, wk, wv))
        a = f.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(s, e)
        x2 = x + a @ wo
        h2 = f.layer_norm(x2, (e,), ln2_w, ln2_b, 1e-5)
        return x2 + _gelu(torch, h2 @ w1) @ w2
    return run


@dataclass(frozen=True)
class Case:
    case: str
    model: Model
    fn: Callable  # fn(**inputs) -> the output, in PyTorch (f: the same tensor copied into pinned memory)
    compile: bool = True
    copy_path: str | None = None


def cases(torch, config: LoopConfig) -> list[Case]:
    from ark_runtime.runtime import graph_copies_unavailable

    q = config.quick
    out = []
    copy_paths = ("sm", "engine") + (() if graph_copies_unavailable() else ("graph",))
    for c in config.cases:
        if c == "a":
            m = models.chain(64)
            out.append(Case("a", m, lambda x, _f=_chain_fn(torch, 64): _f(x)))
        elif c == "b":
            for batch in (1, 8, 64):
                m = models.mlp(batch, hidden=1024 if q else 4096, inner=4096 if q else 16384)
                out.append(Case("b", m, lambda x, w1, w2: _gelu(torch, x @ w1) @ w2))
        elif c == "c":
            for seq in (128, 512):
                m = models.transformer_block(seq, hidden=256 if q else 1024, heads=4 if q else 16)
                out.append(Case("c", m, _block_fn(torch, 4 if q else 16)))
        elif c == "d":
            m = models.dependent_tasks(100 if q else 1000)
            out.append(Case("d", m, lambda x, _n=len(m.ops): _neg_chain(torch, x, _n), compile=False))
        elif c == "e":
            out.append(Case("e", models.matmul(2048 if q else 8192), lambda a, b: a @ b, compile=False))
        elif c == "f":
            for nbytes in (8192, 1 << 20):
                host = torch.empty(nbytes // 4, dtype=torch.float32, pin_memory=True)
                for path in copy_paths:
                    out.append(Case("f", models.copy_out(nbytes), lambda x, _h=host: _h.copy_(x, non_blocking=True),
                                    compile=False, copy_path=path))
        else:
            raise ValueError(f"case {c!r} is not one of {', '.join(CASES)}")
    return out


def _neg_chain(torch, x, n: int):
    for _ in range(n):
        x = torch.neg(x)
    return x


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    scale = max(1.0, float(np.abs(want).max()))
    return float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) / scale


def _torch_baselines(torch, case: Case, inputs: dict, config: LoopConfig, notes: list[str]):
    call = lambda: case.fn(**inputs)  # noqa: E731
    want = call()
    torch.cuda.synchronize()
    first = events_us(torch, call, 1, 1)
    reps = reps_for(first, config.reps)
    eager = events_us(torch, call, reps, config.samples)
    captured = cuda_graph(torch, call)
    graph = events_us(torch, captured.replay, reps, config.samples)
    graph_trips = graph_round_trips(torch, captured, config.roundtrips, config.roundtrip_warmup)
    compiled = None
    if config.compile and case.compile:
        try:
            fn = torch.compile(case.fn)
            ccall = lambda: fn(**inputs)  # noqa: E731
            ccall()
            compiled = graph_us(torch, ccall, reps, config.samples)
        except Exception as exc:  # noqa: BLE001 - a baseline that cannot be built is reported, not fatal
            notes.append(f"torch.compile: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    return want, eager, graph, compiled, graph_trips


def graph_window(done: int, segment: int) -> int:
    """Iterations to run after `done` so that the last RING (the ones iteration_ns() times) all belong to this run
    and take in a relaunch of the kernel's graph (every `segment` iterations) in their middle."""
    boundary = -(-(done + RING // 2 + 1) // segment) * segment  # the first relaunch at least RING // 2 + 1 ahead
    return boundary + RING // 2 - done


@dataclass(frozen=True)
class ArkdmaTimes:
    """What _arkdma measured: per-iteration us by the GPU clock (median, p10, p90, largest), the host round trips,
    the output as NumPy, the runtime's copy report, its profile of the last iteration and its go path."""

    p50: float
    p10: float
    p90: float
    longest: float
    trips: RoundTrips
    out: np.ndarray
    report: list
    profile: object
    go_path: str
    go_writes: dict


def _arkdma(case: Case, inputs: dict, iterations: int, config: LoopConfig) -> ArkdmaTimes:
    """Times the case on the loop kernel. On the graph path the timed iterations take in one relaunch of the
    kernel's graph."""
    from ark_runtime.runtime import GRAPH_LAUNCHES_PER_RUN, Runtime

    bind = {name: t for name, t in inputs.items()}
    kw = {"copy_path": case.copy_path} if case.copy_path else {}
    if case.case == "d":
        kw.update(sms=2, placement="round-robin", fuse_chains=False)  # every op a task, every edge a wait
    with Runtime(case.model, bind=bind, **kw) as rt:
        rt.run(2)
        rt.wait()

        def step() -> None:
            rt.run(1)
            rt.wait()
        trips = round_trips(step, config.roundtrips, config.roundtrip_warmup)
        if case.copy_path == "graph":  # the RING iterations timed take in a relaunch of the kernel's graph
            iterations = graph_window(rt.iterations_done, GRAPH_LAUNCHES_PER_RUN)
        gaps = iteration_us(rt, iterations)
        out = rt.get(case.model.tensors[case.model.outputs[0]].name)
        report = rt.report()
        profile = rt.profile()
        go_path, go_writes = rt.go_path, rt.go_writes
    p10, p50, p90 = np.percentile(gaps, [10, 50, 90])
    return ArkdmaTimes(float(p50), float(p10), float(p90), float(gaps.max()), trips, out, report, profile, go_path,
                       go_writes)


def run(config: LoopConfig, progress=None, on_row=None) -> LoopResult:
    """Measures every case of `config`; `progress(what)` hears each step, `on_row(result)` gets the result so
    far (complete=False) after each case."""
    import torch

    say = progress or (lambda what: None)
    rows = []
    result = LoopResult(torch.cuda.get_device_name(), torch.__version__, rows, complete=False)
    for case in cases(torch, config):
        m = case.model
        what = f"{case.case} {m.name}" + (f" ({case.copy_path})" if case.copy_path else "")
        notes: list[str] = []
        inputs = _inputs(torch, m)
        out_t = m.tensors[m.outputs[0]]
        say(f"{what}: PyTorch")
        want, eager, graph, compiled, graph_trips = _torch_baselines(torch, case, inputs, config, notes)
        want = want.float().cpu().numpy().reshape(out_t.shape)
        say(f"{what}: arkdma")
        iterations = RING + 1
        ark = _arkdma(case, inputs, iterations, config)
        p50, longest, trips = ark.p50, ark.longest, ark.trips
        err = _rel_err(ark.out.reshape(out_t.shape), want)
        best = min(v for v in (eager, graph, compiled) if v is not None)
        row = Row(case.case, m.name, p50, ark.p10, ark.p90, trips.median, eager, graph, compiled, p50 / best, err,
                  err <= TOL[out_t.dtype], notes=notes, profile=ark.profile.as_json(),
                  roundtrip_p10_us=trips.p10, roundtrip_p90_us=trips.p90, graph_roundtrip_us=graph_trips.median,
                  graph_roundtrip_p10_us=graph_trips.p10, graph_roundtrip_p90_us=graph_trips.p90,
                  roundtrip_ratio=trips.median / graph_trips.median, go_path=ark.go_path,
                  host_us=trips.median - p50, graph_host_us=None if graph is None else graph_trips.median - graph,
                  go_writes=ark.go_writes)
        if case.case == "f":
            row.path, row.copy_us = ark.report[0].path, ark.report[0].time_us
            if row.path == "graph":
                from ark_runtime.runtime import GRAPH_LAUNCHES_PER_RUN

                notes.append(f"the kernel relaunches its graph every {GRAPH_LAUNCHES_PER_RUN} iterations (one copy "
                             "each); the longest "
                             f"of the {RING - 1} timed iterations, which take in one relaunch: {longest:.1f} us")
        if case.case == "d":
            row.per_edge_us = p50 / len(m.ops)
        rows.append(row)
        if on_row:
            on_row(result)
    result.complete = True
    return result


def plot(result: LoopResult, path: Path) -> None:
    """Two panels: time per iteration (arkdma and each PyTorch figure), and the host's round trip (arkdma's run(1) +
    wait() against a CUDA graph's replay + synchronize), p10 to p90 as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r.case} {r.model}" + (f"\n{r.path}" if r.path else "") for r in result.rows]
    series = [("arkdma", "arkdma_us", "C0"), ("eager", "eager_us", "C7"), ("CUDA graph", "graph_us", "C1"),
              ("torch.compile", "compile_us", "C2")]
    y = np.arange(len(labels))
    fig, (ax, trip_ax) = plt.subplots(1, 2, figsize=(16, 0.55 * len(labels) + 1.5), sharey=True,
                                      gridspec_kw={"width_ratios": [3, 2]})
    h = 0.8 / len(series)
    for i, (name, key, color) in enumerate(series):
        vals = [getattr(r, key) or np.nan for r in result.rows]
        ax.barh(y + (i - 1.5) * h, vals, h, label=name, color=color)
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("microseconds per iteration (log)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"arkdma bench loop on {result.device} (torch {result.torch})", fontsize=10)
    trips = [("arkdma run(1) + wait()", "roundtrip", "C0"), ("CUDA graph replay + synchronize", "graph_roundtrip",
                                                             "C1")]
    h = 0.8 / len(trips)
    for i, (name, key, color) in enumerate(trips):
        mid = np.array([getattr(r, f"{key}_us") or np.nan for r in result.rows], float)
        lo = np.array([getattr(r, f"{key}_p10_us") or np.nan for r in result.rows], float)
        hi = np.array([getattr(r, f"{key}_p90_us") or np.nan for r in result.rows], float)
        err = np.nan_to_num(np.vstack([mid - lo, hi - mid]), nan=0.0).clip(min=0.0)
        trip_ax.barh(y + (i - 0.5) * h, mid, h, xerr=err, label=name, color=color, capsize=2)
    trip_ax.set_xscale("log")
    trip_ax.set_xlabel("host round trip, microseconds (log; p10-p90)")
    trip_ax.grid(True, axis="x", alpha=0.3)
    trip_ax.legend(fontsize=8)
    trip_ax.set_title("one iteration from Python and back", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
