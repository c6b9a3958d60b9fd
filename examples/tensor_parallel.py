"""A tensor-parallel (TP=2) transformer block on two GPUs in the Megatron split, as one World: the Q, K, V and
MLP-up projections split by columns (column-parallel: each rank its share of the heads and of the MLP), the attention
out-projection and MLP-down split by rows (row-parallel), each followed by an all-reduce of the partial sums. Beside it
the same block in PyTorch + NCCL, both checked against float64 PyTorch before they are timed.

    python -m examples.tensor_parallel                  # GPT-2 XL's shape (below), bf16
    python -m examples.tensor_parallel --tiny           # small shapes, quick
    python -m examples.tensor_parallel --devices 0,0    # both ranks on GPU 0 (a loopback World)

Iterations are a stack of the block: each iteration's input is the output the last one wrote (a state on both
sides), so an iteration is one whole block after another. The shape is GPT-2 XL's (hidden 1600, 25 heads of 64, MLP 6400) at the batch ARK's paper trained it with (NSDI '23:
sequence length 384, batch 4 a GPU), so 1536 tokens. A pre-LN GPT-2 block with biases: x2 = x + attention(LN1(x)) @ Wo
+ bo, out = x2 + gelu(LN2(x2) @ W1 + b1) @ W2 + b2 (GELU's tanh form, causal attention). Megatron needs the heads to
divide among the ranks; GPT-2 XL's 25 do not, so rank 0 takes 13 heads and rank 1 12 (the ranks' models differ in
shape; the all-reduced tensors do not), keeping the model's shape; --heads 20 (heads of 80) splits evenly.

arkdma: WorldRuntime drives both GPUs from this process; time per iteration is the median gap between the ends of
consecutive iterations by the GPU clock (p10, p90), of the slower rank. PyTorch + NCCL: two processes spawned with
torch.multiprocessing, one per GPU, before the World starts (they have exited when it does), each running its shard
with torch.distributed.all_reduce after each row-parallel projection (scaled_dot_product_attention for attention).
Timed by CUDA events between consecutive calls, eagerly and as one CUDA graph replayed, the slower rank. With one GPU
both ranks share it (examples/two_gpus.py says how)."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass

import numpy as np

from examples import two_gpus

RANKS = 2


@dataclass(frozen=True)
class Config:
    batch: int = 4
    seq: int = 384
    hidden: int = 1600
    heads: int = 25
    inner: int = 6400
    dtype: str = "bf16"

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def heads_of(self, rank: int) -> tuple[int, int]:
        """Rank `rank`'s heads [h0, h1): as even as they go, the first ranks one more."""
        per, extra = divmod(self.heads, RANKS)
        h0 = rank * per + min(rank, extra)
        return h0, h0 + per + (rank < extra)

    def inner_of(self, rank: int) -> tuple[int, int]:
        return self.inner * rank // RANKS, self.inner * (rank + 1) // RANKS

    def problems(self) -> list[str]:
        out = [f"{k} must be at least 1, not {v}" for k, v in asdict(self).items() if k != "dtype" and v < 1]
        if not out and self.hidden % self.heads:
            out.append(f"hidden {self.hidden} is not a multiple of heads {self.heads}: each head takes hidden / heads "
                       "columns")
        if not out and self.heads < RANKS:
            out.append(f"heads {self.heads}: each of the {RANKS} ranks needs one head at least")
        if not out and self.inner < RANKS:
            out.append(f"inner {self.inner}: each of the {RANKS} ranks needs one MLP column at least")
        return out


TINY = Config(batch=2, seq=64, hidden=192, heads=3, inner=768)  # 3 heads: the uneven split of GPT-2 XL's 25, small
REPLICATED = ("x", "ln1_w", "ln1_b", "ln2_w", "ln2_b", "bo", "b2")


def full_inputs(cfg: Config, seed: int) -> dict[str, np.ndarray]:
    """The block's input and every parameter, unsplit: standard normal, weights scaled by 1/sqrt(fan-in), layer-norm
    weights near 1."""
    rng = np.random.default_rng(seed)
    h, i = cfg.hidden, cfg.inner

    def normal(*shape, scale=1.0):
        return rng.standard_normal(shape, np.float32) * np.float32(scale)

    out = {"x": normal(cfg.batch, cfg.seq, h)}
    for n in ("ln1", "ln2"):
        out[f"{n}_w"], out[f"{n}_b"] = 1 + normal(h, scale=0.1), normal(h, scale=0.1)
    for n in "qkvo":
        out[f"w{n}"], out[f"b{n}"] = normal(h, h, scale=1 / math.sqrt(h)), normal(h, scale=0.1)
    out["w1"], out["b1"] = normal(h, i, scale=1 / math.sqrt(h)), normal(i, scale=0.1)
    out["w2"], out["b2"] = normal(i, h, scale=1 / math.sqrt(i)), normal(h, scale=0.1)
    return out


def shard(cfg: Config, full: dict[str, np.ndarray], rank: int) -> dict[str, np.ndarray]:
    """Rank `rank`'s inputs: the replicated ones, its columns of Q, K, V and MLP-up (and their biases), its rows of
    the out-projection and MLP-down."""
    c0, c1 = (h * cfg.head_dim for h in cfg.heads_of(rank))
    i0, i1 = cfg.inner_of(rank)
    out = {k: full[k] for k in REPLICATED}
    for n in "qkv":
        out[f"w{n}"], out[f"b{n}"] = full[f"w{n}"][:, c0:c1], full[f"b{n}"][c0:c1]
    out["wo"] = full["wo"][c0:c1]
    out["w1"], out["b1"] = full["w1"][:, i0:i1], full["b1"][i0:i1]
    out["w2"] = full["w2"][i0:i1]
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def inputs(cfg: Config, seed: int, rank: int) -> dict[str, np.ndarray]:
    return shard(cfg, full_inputs(cfg, seed), rank)


def world(cfg: Config):
    """Each rank's shard of the block, its two all-reduces where Megatron puts them."""
    from ark_runtime.model import Model
    from ark_runtime.world import World

    h, dt = cfg.hidden, cfg.dtype
    models = []
    for r in range(RANKS):
        h0, h1 = cfg.heads_of(r)
        i0, i1 = cfg.inner_of(r)
        w, mine = (h1 - h0) * cfg.head_dim, i1 - i0
        m = Model("tp-block", rank=r, world=RANKS)
        x = m.state("x", (cfg.batch, cfg.seq, h), dt)  # the next iteration's input: this one's output
        ln = {n: m.input(n, (h,), dt) for n in ("ln1_w", "ln1_b", "ln2_w", "ln2_b")}
        proj = {n: (m.input(f"w{n}", (h, w), dt), m.input(f"b{n}", (w,), dt)) for n in "qkv"}
        wo, bo = m.input("wo", (w, h), dt), m.input("bo", (h,), dt)
        w1, b1 = m.input("w1", (h, mine), dt), m.input("b1", (mine,), dt)
        w2, b2 = m.input("w2", (mine, h), dt), m.input("b2", (h,), dt)
        a = m.layernorm(x, ln["ln1_w"], ln["ln1_b"])
        q, k, v = (m.add(m.matmul(a, wt), bt) for wt, bt in (proj[n] for n in "qkv"))
        o = m.all_reduce(m.matmul(m.attention(q, k, v, heads=h1 - h0), wo))
        x2 = m.add(m.add(x, o), bo)
        u = m.gelu(m.add(m.matmul(m.layernorm(x2, ln["ln2_w"], ln["ln2_b"]), w1), b1))
        d = m.all_reduce(m.matmul(u, w2))
        out = m.add(m.add(x2, d), b2)
        m.output(out)
        m.write(x, out)
        models.append(m)
    return World(models)


def attention_part(torch, t: dict, cfg: Config, heads: int):
    """A rank's attention share: its heads of attention(LN1(x)), through its rows of Wo (a partial sum)."""
    f = torch.nn.functional
    b, s, h = t["x"].shape
    a = f.layer_norm(t["x"], (h,), t["ln1_w"], t["ln1_b"], 1e-5)
    q, k, v = ((a @ t[f"w{n}"] + t[f"b{n}"]).view(b, s, heads, cfg.head_dim).transpose(1, 2) for n in "qkv")
    att = f.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, heads * cfg.head_dim)
    return att @ t["wo"]


def mlp_part(torch, t: dict, x2):
    """A rank's MLP share: its columns of gelu(LN2(x2) @ W1 + b1), through its rows of W2 (a partial sum)."""
    f = torch.nn.functional
    a = f.layer_norm(x2, (x2.shape[-1],), t["ln2_w"], t["ln2_b"], 1e-5)
    return f.gelu(a @ t["w1"] + t["b1"], approximate="tanh") @ t["w2"]


def whole(torch, t: list[dict], cfg: Config) -> list[list]:
    """Every rank's shard in one place, each all-reduce the sum in rank order: every rank's output (the same), which
    becomes every rank's x."""
    heads = [h1 - h0 for h0, h1 in map(cfg.heads_of, range(RANKS))]
    o = sum(attention_part(torch, t[r], cfg, heads[r]) for r in range(RANKS))
    x2 = t[0]["x"] + o + t[0]["bo"]
    d = sum(mlp_part(torch, t[r], x2) for r in range(RANKS))
    out = x2 + d + t[0]["b2"]
    for r in range(RANKS):
        t[r]["x"].copy_(out)
    return [[out.clone()] for _ in range(RANKS)]


def reference(cfg: Config, values: list[dict[str, np.ndarray]], iterations: int = 1) -> list[list[np.ndarray]]:
    """Every rank's output in float64 (PyTorch on the CPU) after `iterations` blocks, from the inputs as the GPU
    holds them."""
    return two_gpus.float64_outputs(lambda torch, t: whole(torch, t, cfg), values, iterations)


def rank_step(torch, dist, t: dict, cfg: Config, rank: int):
    """This rank's block with torch.distributed all-reduces, its output the next call's input: a function of no
    arguments returning [output]."""
    h0, h1 = cfg.heads_of(rank)

    def step():
        o = attention_part(torch, t, cfg, h1 - h0)
        dist.all_reduce(o)
        x2 = t["x"] + o + t["bo"]
        d = mlp_part(torch, t, x2)
        dist.all_reduce(d)
        out = x2 + d + t["b2"]
        t["x"].copy_(out)  # the next block's input
        return [out]
    return step


def torch_rank(rank: int, world_size: int, device, args: dict):
    """This rank's shard in PyTorch + NCCL (a child process of two_gpus.run_group): its output and times."""
    import torch
    import torch.distributed as dist

    cfg = Config(**args["cfg"])
    t = two_gpus.on_device(torch, inputs(cfg, args["seed"], rank), cfg.dtype, device)
    step = rank_step(torch, dist, t, cfg, rank)
    yield two_gpus.timed_rank(torch, dist, step, rank, args["iterations"])


def torch_loopback(rank: int, world_size: int, device, args: dict):
    """Both shards in one process on one GPU (a loopback: NCCL cannot place two ranks on a GPU)."""
    import torch

    cfg = Config(**args["cfg"])
    full = full_inputs(cfg, args["seed"])
    t = [two_gpus.on_device(torch, shard(cfg, full, r), cfg.dtype, device) for r in range(RANKS)]
    yield two_gpus.timed_loopback(torch, lambda: whole(torch, t, cfg), args["iterations"])


def program(cfg: Config, seed: int, iterations: int):
    w = world(cfg)
    full = full_inputs(cfg, seed)
    values = [shard(cfg, full, r) for r in range(RANKS)]
    want = reference(cfg, [two_gpus.rounded(w.models[r], v) for r, v in enumerate(values)])
    split = "/".join(str(h1 - h0) for h0, h1 in map(cfg.heads_of, range(RANKS)))
    title = (f"tensor parallel (TP={RANKS}, Megatron split): batch {cfg.batch} x seq {cfg.seq}, hidden {cfg.hidden}, "
             f"{cfg.heads} heads ({split} a rank), MLP {cfg.inner}, {cfg.dtype}")
    return two_gpus.Program(title, "examples.tensor_parallel", w, values, want, cfg.dtype,
                            {"cfg": asdict(cfg), "seed": seed, "iterations": iterations})


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m examples.tensor_parallel", description=__doc__.splitlines()[0])
    two_gpus.example_arguments(p)
    for name in ("batch", "seq", "hidden", "heads", "inner"):
        p.add_argument(f"--{name}", type=int, help=f"default {getattr(Config, name)} (--tiny {getattr(TINY, name)})")
    args, devices = two_gpus.checked_arguments(p, argv)
    cfg = TINY if args.tiny else Config()
    given = {n: getattr(args, n) for n in ("batch", "seq", "hidden", "heads", "inner") if getattr(args, n) is not None}
    cfg = Config(**{**asdict(cfg), **given})
    problems = cfg.problems()
    if problems:
        p.error("; ".join(problems))
    return args, devices, cfg


def main(argv: list[str] | None = None) -> int:
    return two_gpus.run_example("tensor_parallel", argv, parse, program)


if __name__ == "__main__":
    sys.exit(main())
