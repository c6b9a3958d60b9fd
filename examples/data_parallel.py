"""A data-parallel step on two GPUs, as one World: each rank computes the weight gradient of several layers from its
own share of the batch (activations^T @ output gradients, one matmul per layer), gradients bucketed one layer a bucket,
and each bucket all-reduced as soon as it is computed while the next bucket computes: the plan orders each
all-reduce's tiles after the rows they read, on either GPU, and nothing else, so communication overlaps compute with
no barrier placed by hand. Beside it the same step in PyTorch + NCCL, both checked against float64 PyTorch before they
are timed.

    python -m examples.data_parallel                    # 8 buckets of 2048 x 2048 from 2048 tokens a rank, bf16
    python -m examples.data_parallel --tiny             # small shapes, quick
    python -m examples.data_parallel --devices 0,0      # both ranks on GPU 0 (a loopback World)

The all-reduce sums (a mean is the sum scaled by 1/ranks, left to the optimizer). arkdma: WorldRuntime drives both
GPUs from this process; time per iteration is the median gap between the ends of consecutive iterations by the GPU
clock (p10, p90), of the slower rank. PyTorch + NCCL: two processes spawned with torch.multiprocessing, one per GPU,
before the World starts (they have exited when it does); each bucket's all_reduce launched with async_op=True as soon
as its matmul is queued (what DistributedDataParallel's buckets do), every one waited for at the end. Timed by CUDA
events between consecutive calls, eagerly and as one CUDA graph replayed, the slower rank. With one GPU both ranks
share it (examples/two_gpus.py says how)."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass

import numpy as np

from examples import two_gpus


@dataclass(frozen=True)
class Config:
    buckets: int = 8
    rows: int = 2048  # a layer's inputs (the gradient's rows)
    cols: int = 2048  # its outputs (the gradient's columns)
    tokens: int = 2048  # this rank's share of the batch
    dtype: str = "bf16"


TINY = Config(buckets=3, rows=128, cols=192, tokens=256)


def world(cfg: Config):
    """Each rank: grad_b = a_b @ g_b (a_b: the layer's activations transposed, [rows, tokens]; g_b: the gradient of
    its outputs, [tokens, cols]), then all_reduce(grad_b), bucket by bucket."""
    from ark_runtime.model import Model
    from ark_runtime.world import World

    models = []
    for r in range(2):
        m = Model("data-parallel", rank=r, world=2)
        for b in range(cfg.buckets):
            a = m.input(f"a{b}", (cfg.rows, cfg.tokens), cfg.dtype)
            g = m.input(f"g{b}", (cfg.tokens, cfg.cols), cfg.dtype)
            m.output(m.all_reduce(m.matmul(a, g)))
        models.append(m)
    return World(models)


def inputs(cfg: Config, seed: int, rank: int) -> dict[str, np.ndarray]:
    """Rank `rank`'s share of the batch: standard normal, each bucket's activations scaled by 1/sqrt(tokens)."""
    rng = np.random.default_rng([seed, rank])
    out = {}
    for b in range(cfg.buckets):
        out[f"a{b}"] = rng.standard_normal((cfg.rows, cfg.tokens), np.float32) / math.sqrt(cfg.tokens)
        out[f"g{b}"] = rng.standard_normal((cfg.tokens, cfg.cols), np.float32)
    return out


def whole(torch, t: list[dict], cfg: Config) -> list[list]:
    """Both ranks in one place: every rank's reduced gradients in order (the sum in rank order)."""
    grads = [sum(t[r][f"a{b}"] @ t[r][f"g{b}"] for r in range(2)) for b in range(cfg.buckets)]
    return [grads, [g.clone() for g in grads]]


def reference(cfg: Config, values: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
    """Every rank's outputs in float64 (PyTorch on the CPU), from the inputs as the GPU holds them."""
    import torch

    t = [{k: torch.from_numpy(np.asarray(v, np.float64)) for k, v in vals.items()} for vals in values]
    with torch.no_grad():
        return [[o.numpy() for o in outs] for outs in whole(torch, t, cfg)]


def torch_rank(rank: int, world_size: int, device, args: dict):
    """This rank's step in PyTorch + NCCL (a child process of two_gpus.run_group): its outputs and times."""
    import torch
    import torch.distributed as dist

    cfg = Config(**args["cfg"])
    t = two_gpus.on_device(torch, inputs(cfg, args["seed"], rank), cfg.dtype, device)

    def step():
        grads, pending = [], []
        for b in range(cfg.buckets):
            grads.append(t[f"a{b}"] @ t[f"g{b}"])
            pending.append(dist.all_reduce(grads[-1], async_op=True))
        for w in pending:
            w.wait()
        return grads

    with torch.no_grad():
        outs = two_gpus.host(step())
        times = two_gpus.time_twin(torch, step, args["iterations"], dist.new_group(backend="gloo"),
                                   two_gpus.line_up(torch, dist))
    yield {"outs": {rank: outs}, "times": times}


def torch_loopback(rank: int, world_size: int, device, args: dict):
    """Both ranks in one process on one GPU (a loopback: NCCL cannot place two ranks on a GPU)."""
    import torch

    cfg = Config(**args["cfg"])
    t = [two_gpus.on_device(torch, inputs(cfg, args["seed"], r), cfg.dtype, device) for r in range(2)]
    with torch.no_grad():
        outs = {r: two_gpus.host(o) for r, o in enumerate(whole(torch, t, cfg))}
        times = two_gpus.time_twin(torch, lambda: whole(torch, t, cfg), args["iterations"])
    yield {"outs": outs, "times": times}


def program(cfg: Config, seed: int, iterations: int):
    w = world(cfg)
    values = [inputs(cfg, seed, r) for r in range(2)]
    want = reference(cfg, [two_gpus.rounded(w.models[r], v) for r, v in enumerate(values)])
    mib = cfg.rows * cfg.cols * 2 / (1 << 20)
    title = (f"data parallel: {cfg.buckets} buckets, each a {cfg.rows} x {cfg.tokens} @ {cfg.tokens} x {cfg.cols} "
             f"matmul then an all-reduce of {mib:.2f} MiB, {cfg.dtype}")
    return two_gpus.Program(title, "examples.data_parallel", w, values, want, cfg.dtype,
                            {"cfg": asdict(cfg), "seed": seed, "iterations": iterations})


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m examples.data_parallel", description=__doc__.splitlines()[0])
    two_gpus.example_arguments(p)
    p.add_argument("--buckets", type=int, help=f"buckets (default {Config.buckets}; --tiny {TINY.buckets})")
    p.add_argument("--tokens", type=int, help=f"tokens a rank (default {Config.tokens})")
    args, devices = two_gpus.checked_arguments(p, argv)
    cfg = TINY if args.tiny else Config()
    for name in ("buckets", "tokens"):
        value = getattr(args, name)
        if value is not None:
            if value < 1:
                p.error(f"--{name} must be at least 1, not {value}")
            cfg = Config(**{**asdict(cfg), name: value})
    return args, devices, cfg


def main(argv: list[str] | None = None) -> int:
    args, devices, cfg = parse(argv)
    two_gpus.keep_multicast_off()
    from ark_runtime.model import ModelError
    from ark_runtime.runtime import LoopError
    from driver.errors import ArkdmaError

    try:
        placement = two_gpus.placed(devices)
        return two_gpus.compare(program(cfg, args.seed, args.iterations), placement, args.iterations)
    except (two_gpus.TwoGpuError, LoopError, ModelError, ArkdmaError) as exc:
        print(f"data_parallel: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
