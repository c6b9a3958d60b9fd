"""Timing helpers shared by the benchmarks that put the loop kernel beside PyTorch: CUDA-event time per call, one call
captured in a CUDA graph and replayed, host round trips by perf_counter, and a Runtime's time per iteration by the GPU
clock stamps its kernel writes (`Runtime.iteration_ns`).

torch is passed in rather than imported, so this module imports without it."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np


def events_us(torch, call: Callable, reps: int, samples: int) -> float:
    """Median over `samples` of CUDA-event time per call, `reps` calls each, after a warm-up."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    out = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            call()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) * 1e3 / reps)
    return statistics.median(out)


def cuda_graph(torch, call: Callable):
    """One call captured in a CUDA graph (after warm-up on a side stream, as PyTorch asks)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return graph


def graph_us(torch, call: Callable, reps: int, samples: int) -> float:
    return events_us(torch, cuda_graph(torch, call).replay, reps, samples)


def reps_for(us_guess: float, reps: int) -> int:
    """Fewer calls per timing for long calls (about 0.2 s at most)."""
    return max(3, min(reps, int(2e5 / max(us_guess, 1.0))))


@dataclass(frozen=True)
class Spread:
    """The median of some samples with their 10th and 90th percentiles, in the samples' unit."""

    median: float
    p10: float
    p90: float

    @classmethod
    def of(cls, samples) -> Spread:
        if len(samples) == 0:
            raise ValueError("a spread of no samples")
        p10, p50, p90 = np.percentile(np.asarray(samples, float), [10, 50, 90])
        return cls(float(p50), float(p10), float(p90))


RoundTrips = Spread  # host round trips by perf_counter, in us


def round_trips(step: Callable[[], None], samples: int, warmup: int) -> Spread:
    """`step()` (one round trip: start the work, return once the host knows it finished) `warmup` times, then
    `samples` times timed one by one; us."""
    for _ in range(warmup):
        step()
    trips = []
    for _ in range(samples):
        t0 = time.perf_counter()
        step()
        trips.append((time.perf_counter() - t0) * 1e6)
    return Spread.of(trips)


def graph_round_trips(torch, graph, samples: int, warmup: int) -> Spread:
    """One replay of a CUDA graph + torch.cuda.synchronize(), per round trip."""
    torch.cuda.synchronize()

    def step() -> None:
        graph.replay()
        torch.cuda.synchronize()
    return round_trips(step, samples, warmup)


def iteration_us(rt, iterations: int, timeout: float = 120.0) -> np.ndarray:
    """Runs `iterations` more iterations of a Runtime and returns the gaps between the GPU clock stamps of the last
    ones (at most RING of them: `Runtime.iteration_ns`), us: time per iteration with no host on the path."""
    rt.run(iterations)
    rt.wait(timeout=timeout)
    return np.diff(rt.iteration_ns()) / 1e3
