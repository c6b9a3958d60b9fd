"""A two-stage pipeline on two GPUs with micro-batches, as one World: stage 0 (rank 0) runs an MLP layer on each
micro-batch and sends the result to stage 1 (rank 1), which receives it and runs its own MLP layer. k micro-batches
are k send/recv pairs with tags 0..k-1; the plan orders each receiver's tiles after the rows they read have landed
and nothing else, so stage 0 computes micro-batch j+1 while j travels and stage 1 computes it. Beside it the same
program in PyTorch + NCCL, both checked against float64 PyTorch before they are timed.

    python -m examples.pipeline                     # 8 micro-batches of 128 x 2048, MLP 2048 -> 8192 -> 2048, bf16
    python -m examples.pipeline --tiny              # small shapes, quick
    python -m examples.pipeline --devices 0,0       # both stages on GPU 0 (a loopback World)

An MLP layer: gelu(x @ w1) @ w2 (GELU's tanh form), each stage with its own weights; stage 0's activations are
outputs too (a training step keeps them). arkdma: WorldRuntime drives both GPUs from this process; time per
iteration is the median gap between the ends of consecutive iterations by the GPU clock (p10, p90), of the slower
rank. PyTorch + NCCL: two processes spawned with torch.multiprocessing, one per GPU, before the World starts (they
have exited when it does); rank 0 isends each micro-batch's activations as soon as computed, rank 1 posts every
irecv first and waits for each before its layer: NCCL's transfers overlap compute as a hand-written pipeline
would. Timed by CUDA events between consecutive calls, eagerly and as one CUDA graph replayed, the slower rank.
With one GPU both ranks share it (examples/two_gpus.py says how)."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass

import numpy as np

from examples import two_gpus


@dataclass(frozen=True)
class Config:
    micro: int = 8  # micro-batches, one send/recv pair each
    rows: int = 128  # a micro-batch's rows (tokens)
    hidden: int = 2048
    inner: int = 8192
    dtype: str = "bf16"


TINY = Config(micro=4, rows=32, hidden=256, inner=1024)


def world(cfg: Config):
    """Rank 0: each micro-batch through its MLP layer and sent (tag j); rank 1: each received, through its layer."""
    from ark_runtime.model import Model
    from ark_runtime.world import World

    models = []
    for r in range(2):
        m = Model("pipeline", rank=r, world=2)
        w1, w2 = m.input("w1", (cfg.hidden, cfg.inner), cfg.dtype), m.input("w2", (cfg.inner, cfg.hidden), cfg.dtype)
        for j in range(cfg.micro):
            if r == 0:
                h = m.matmul(m.gelu(m.matmul(m.input(f"x{j}", (cfg.rows, cfg.hidden), cfg.dtype), w1)), w2)
                m.send(h, 1, tag=j)
                m.output(h)
            else:
                got = m.recv((cfg.rows, cfg.hidden), cfg.dtype, 0, tag=j)
                m.output(m.matmul(m.gelu(m.matmul(got, w1)), w2))
        models.append(m)
    return World(models)


def inputs(cfg: Config, seed: int, rank: int) -> dict[str, np.ndarray]:
    """Rank `rank`'s weights (scaled by 1/sqrt(fan-in)) and, on rank 0, the micro-batches; standard normal."""
    rng = np.random.default_rng([seed, rank])
    out = {"w1": rng.standard_normal((cfg.hidden, cfg.inner), np.float32) / math.sqrt(cfg.hidden),
           "w2": rng.standard_normal((cfg.inner, cfg.hidden), np.float32) / math.sqrt(cfg.inner)}
    if rank == 0:
        out.update({f"x{j}": rng.standard_normal((cfg.rows, cfg.hidden), np.float32) for j in range(cfg.micro)})
    return out


def stage(torch, x, w1, w2):
    return torch.nn.functional.gelu(x @ w1, approximate="tanh") @ w2


def whole(torch, t: list[dict], cfg: Config) -> list[list]:
    """Both stages in one place (t: each rank's tensors): every rank's outputs in order, each message a copy."""
    hs = [stage(torch, t[0][f"x{j}"], t[0]["w1"], t[0]["w2"]) for j in range(cfg.micro)]
    return [hs, [stage(torch, h.clone(), t[1]["w1"], t[1]["w2"]) for h in hs]]


def reference(cfg: Config, values: list[dict[str, np.ndarray]], iterations: int = 1) -> list[list[np.ndarray]]:
    """Every rank's outputs in float64 (PyTorch on the CPU), from the inputs as the GPU holds them (the same after
    any number of iterations: nothing carries over, so one run gives them)."""
    return two_gpus.float64_outputs(lambda torch, t: whole(torch, t, cfg), values)


def torch_rank(rank: int, world_size: int, device, args: dict):
    """This rank's stage in PyTorch + NCCL (a child process of two_gpus.run_group): its outputs and times."""
    import torch
    import torch.distributed as dist

    cfg = Config(**args["cfg"])
    t = two_gpus.on_device(torch, inputs(cfg, args["seed"], rank), cfg.dtype, device)
    dt = two_gpus.torch_dtype(torch, cfg.dtype)
    bufs = [torch.empty((cfg.rows, cfg.hidden), dtype=dt, device=device) for _ in range(cfg.micro)]

    def step():
        if rank == 0:
            hs, sent = [], []
            for j in range(cfg.micro):
                hs.append(stage(torch, t[f"x{j}"], t["w1"], t["w2"]))
                sent.append(dist.isend(hs[-1], 1, tag=j))
            for s in sent:
                s.wait()
            return hs
        posted = [dist.irecv(bufs[j], 0, tag=j) for j in range(cfg.micro)]
        outs = []
        for j in range(cfg.micro):
            posted[j].wait()
            outs.append(stage(torch, bufs[j], t["w1"], t["w2"]))
        return outs

    yield two_gpus.timed_rank(torch, dist, step, rank, args["iterations"])


def torch_loopback(rank: int, world_size: int, device, args: dict):
    """Both stages in one process on one GPU (a loopback: NCCL cannot place two ranks on a GPU)."""
    import torch

    cfg = Config(**args["cfg"])
    t = [two_gpus.on_device(torch, inputs(cfg, args["seed"], r), cfg.dtype, device) for r in range(2)]
    yield two_gpus.timed_loopback(torch, lambda: whole(torch, t, cfg), args["iterations"])


def program(cfg: Config, seed: int, iterations: int):
    w = world(cfg)
    values = [inputs(cfg, seed, r) for r in range(2)]
    want = reference(cfg, [two_gpus.rounded(w.models[r], v) for r, v in enumerate(values)])
    title = (f"pipeline: 2 stages, {cfg.micro} micro-batches of {cfg.rows} x {cfg.hidden}, MLP {cfg.hidden} -> "
             f"{cfg.inner} -> {cfg.hidden} per stage, {cfg.dtype}")
    return two_gpus.Program(title, "examples.pipeline", w, values, want, cfg.dtype,
                            {"cfg": asdict(cfg), "seed": seed, "iterations": iterations})


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m examples.pipeline", description=__doc__.splitlines()[0])
    two_gpus.example_arguments(p)
    p.add_argument("--micro", type=int, help=f"micro-batches (default {Config.micro}; --tiny {TINY.micro})")
    p.add_argument("--rows", type=int, help=f"rows of a micro-batch (default {Config.rows})")
    args, devices = two_gpus.checked_arguments(p, argv)
    return args, devices, two_gpus.sized(p, args, TINY if args.tiny else Config(), ("micro", "rows"))


def main(argv: list[str] | None = None) -> int:
    return two_gpus.run_example("pipeline", argv, parse, program)


if __name__ == "__main__":
    sys.exit(main())
