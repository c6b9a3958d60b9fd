"""A data-parallel training step on two GPUs, as one World: each rank computes, from its own share of the batch, the
weight gradient of several layers one after another (one layer a bucket), each bucket all-reduced as soon as it is
computed while the next bucket computes, then each layer's weights stepped by its summed gradient: the plan orders
each all-reduce's tiles after the rows they read, on either GPU, and nothing else, so communication overlaps compute
with no barrier placed by hand. Beside it the same step in PyTorch + NCCL, both checked against float64 PyTorch
before they are timed.

    python -m examples.data_parallel                    # 8 layers of 2048 x 2048, 2048 tokens a rank, bf16
    python -m examples.data_parallel --tiny             # small shapes, quick
    python -m examples.data_parallel --devices 0,0      # both ranks on GPU 0 (a loopback World)

Each layer is a least-squares model trained by SGD, so that a step's gradients come from the weights the last step
left (as training's do): err = x @ w - y, grad = x^T @ err (x^T given beside x, as a backward pass keeps the
activations), summed over the ranks by the all-reduce, then w <- w - grad (the learning rate folded into x's
scale). Iterations are steps, each reading the weights the step before wrote, so their times are of whole steps.
arkdma: WorldRuntime drives both GPUs from this process; a layer's next step waits only for what it reads (its own
weights), so steps follow each other as the dependencies allow; time per iteration is the median gap between the ends
of consecutive iterations by the GPU clock (p10, p90), of the slower rank. PyTorch + NCCL: two processes spawned with
torch.multiprocessing, one per GPU, before the World starts (they have exited when it does); each bucket's all_reduce
launched with async_op=True as soon as its matmul is queued (what DistributedDataParallel's buckets do), then, as an
optimizer step does, each waited for and its weights stepped. Timed by CUDA events between consecutive calls, eagerly
and as one CUDA graph replayed, the slower rank. With one GPU both ranks share it (examples/two_gpus.py says how)."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass

import numpy as np

from examples import two_gpus


@dataclass(frozen=True)
class Config:
    buckets: int = 8  # layers, one bucket each
    rows: int = 2048  # a layer's inputs (its weights' and gradient's rows)
    cols: int = 2048  # its outputs (their columns)
    tokens: int = 2048  # this rank's share of the batch
    dtype: str = "bf16"


TINY = Config(buckets=3, rows=128, cols=192, tokens=256)


def world(cfg: Config):
    """Each rank, layer by layer: err = x @ w - y; grad = x^T @ err; all_reduce(grad) (an output); w <- w - grad."""
    from ark_runtime.model import Model
    from ark_runtime.world import World

    models = []
    for r in range(2):
        m = Model("data-parallel", rank=r, world=2)
        for b in range(cfg.buckets):
            x = m.input(f"x{b}", (cfg.tokens, cfg.rows), cfg.dtype)
            xt = m.input(f"xt{b}", (cfg.rows, cfg.tokens), cfg.dtype)
            y = m.input(f"y{b}", (cfg.tokens, cfg.cols), cfg.dtype)
            w = m.state(f"w{b}", (cfg.rows, cfg.cols), cfg.dtype)
            summed = m.all_reduce(m.matmul(xt, m.binary("sub", m.matmul(x, w), y)))
            m.output(summed)
            m.write(w, m.binary("sub", w, summed))
        models.append(m)
    return World(models)


def inputs(cfg: Config, seed: int, rank: int) -> dict[str, np.ndarray]:
    """Rank `rank`'s share of the batch (x, its transpose, y: standard normal, x scaled so that the SGD steps shrink
    the error) and the weights, the same on every rank."""
    rng, shared = np.random.default_rng([seed, rank]), np.random.default_rng([seed, 1 << 20])
    out = {}
    for b in range(cfg.buckets):
        x = rng.standard_normal((cfg.tokens, cfg.rows), np.float32) * np.float32(0.25 / math.sqrt(cfg.tokens))
        out[f"x{b}"], out[f"xt{b}"] = x, np.ascontiguousarray(x.T)
        out[f"y{b}"] = rng.standard_normal((cfg.tokens, cfg.cols), np.float32)
        out[f"w{b}"] = shared.standard_normal((cfg.rows, cfg.cols), np.float32) / np.float32(math.sqrt(cfg.rows))
    return out


def whole(torch, t: list[dict], cfg: Config) -> list[list]:
    """One step of both ranks in one place (every rank's weights stepped): every rank's summed gradients in order."""
    grads = []
    for b in range(cfg.buckets):
        g = sum(t[r][f"xt{b}"] @ (t[r][f"x{b}"] @ t[r][f"w{b}"] - t[r][f"y{b}"]) for r in range(2))
        for r in range(2):
            t[r][f"w{b}"] -= g
        grads.append(g)
    return [grads, [g.clone() for g in grads]]


def reference(cfg: Config, values: list[dict[str, np.ndarray]], iterations: int = 1) -> list[list[np.ndarray]]:
    """Every rank's outputs in float64 (PyTorch on the CPU) after `iterations` steps, from the inputs as the GPU
    holds them."""
    return two_gpus.float64_outputs(lambda torch, t: whole(torch, t, cfg), values, iterations)


def torch_rank(rank: int, world_size: int, device, args: dict):
    """This rank's step in PyTorch + NCCL (a child process of two_gpus.run_group): its outputs and times."""
    import torch
    import torch.distributed as dist

    cfg = Config(**args["cfg"])
    t = two_gpus.on_device(torch, inputs(cfg, args["seed"], rank), cfg.dtype, device)

    grads = [torch.empty((cfg.rows, cfg.cols), dtype=t["w0"].dtype, device=device) for _ in range(cfg.buckets)]

    def step():
        pending = []
        for b in range(cfg.buckets):
            torch.matmul(t[f"xt{b}"], t[f"x{b}"] @ t[f"w{b}"] - t[f"y{b}"], out=grads[b])
            pending.append(dist.all_reduce(grads[b], async_op=True))
        for b, w in enumerate(pending):  # the optimizer's step, once the gradients are summed
            w.wait()
            t[f"w{b}"].sub_(grads[b])
        return grads

    yield two_gpus.timed_rank(torch, dist, step, rank, args["iterations"])


def torch_loopback(rank: int, world_size: int, device, args: dict):
    """Both ranks in one process on one GPU (a loopback: NCCL cannot place two ranks on a GPU)."""
    import torch

    cfg = Config(**args["cfg"])
    t = [two_gpus.on_device(torch, inputs(cfg, args["seed"], r), cfg.dtype, device) for r in range(2)]
    yield two_gpus.timed_loopback(torch, lambda: whole(torch, t, cfg), args["iterations"])


def program(cfg: Config, seed: int, iterations: int):
    w = world(cfg)
    values = [inputs(cfg, seed, r) for r in range(2)]
    want = reference(cfg, [two_gpus.rounded(w.models[r], v) for r, v in enumerate(values)])
    mib = cfg.rows * cfg.cols * 2 / (1 << 20)
    title = (f"data parallel: {cfg.buckets} layers a step, each x @ w ({cfg.tokens} x {cfg.rows} @ {cfg.rows} x "
             f"{cfg.cols}), its gradient x^T @ err, an all-reduce of {mib:.2f} MiB and an SGD step, {cfg.dtype}")
    return two_gpus.Program(title, "examples.data_parallel", w, values, want, cfg.dtype,
                            {"cfg": asdict(cfg), "seed": seed, "iterations": iterations})


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m examples.data_parallel", description=__doc__.splitlines()[0])
    two_gpus.example_arguments(p)
    p.add_argument("--buckets", type=int, help=f"layers, a bucket each (default {Config.buckets}; --tiny {TINY.buckets})")
    p.add_argument("--tokens", type=int, help=f"tokens a rank (default {Config.tokens})")
    args, devices = two_gpus.checked_arguments(p, argv)
    return args, devices, two_gpus.sized(p, args, TINY if args.tiny else Config(), ("buckets", "tokens"))


def main(argv: list[str] | None = None) -> int:
    return two_gpus.run_example("data_parallel", argv, parse, program)


if __name__ == "__main__":
    sys.exit(main())
