"""How the communication examples (pipeline, data_parallel, tensor_parallel) run one program on two GPUs and time it:
where the ranks go (two GPUs, or one GPU that both share as a loopback World), the World on WorldRuntime timed by the
GPU clock, and the program's PyTorch twin, one process per rank joined by torch.distributed's NCCL backend and timed
with CUDA events.

WorldRuntime is one process driving every GPU; NCCL wants one process per GPU. So the twin runs in child processes
spawned with torch.multiprocessing, first, and has exited (its memory freed, its NCCL kernels done) before the World's
kernels become resident in this process: resident loop kernels hold the SMs, which would keep NCCL's kernels from
running. On one GPU NCCL cannot place two ranks (it refuses a GPU used twice), so the twin is one child that runs both
ranks' PyTorch programs in turn on that GPU, each message or collective a local copy or sum: the same arithmetic,
no NCCL.

Every process keeps NVLink multicast off (MULTICAST_OFF): NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1."""

from __future__ import annotations

import importlib
import os
import queue as queue_mod
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
RANKS = 2
TOLERANCE = {"fp32": 2e-4, "fp16": 2e-2, "bf16": 6e-2}  # of the output's scale, as examples/loop_model.py
WARMUP = 3  # PyTorch calls before the timed ones


class TwoGpuError(RuntimeError):
    """The ranks cannot be placed, or a PyTorch twin failed or did not finish; the message says which and why."""


def keep_multicast_off() -> None:
    os.environ.update(MULTICAST_OFF)


# --- where the ranks go ---------------------------------------------------------------------------------------------
def parse_devices(text: str) -> tuple[int, ...]:
    """'0,1' -> (0, 1): one GPU index per rank."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != RANKS or not all(p.isdigit() for p in parts):
        raise ValueError(f"--devices {text!r}: give {RANKS} GPU indices, one per rank, as 0,1 (or 0,0: both ranks on "
                         "GPU 0, a loopback)")
    return tuple(int(p) for p in parts)


@dataclass(frozen=True)
class Placement:
    devices: tuple[int, ...]  # per rank
    sms: int | None  # each rank's SMs where ranks share a GPU (None: every SM of its own GPU)
    loopback: bool
    note: str  # what was placed where, and why, for the user

    def describe(self) -> str:
        return self.note


def place(asked: Sequence[int], gpus: int, sms_per_gpu: int) -> Placement:
    """The ranks on the GPUs asked for where the machine has them; where it has one GPU, both ranks on it (a loopback
    World, half its SMs each). TwoGpuError where nothing fits."""
    asked = tuple(asked)
    if gpus < 1:
        raise TwoGpuError("no CUDA GPU is visible: the examples run on one or two GPUs")
    if len(asked) != RANKS or any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in asked):
        raise TwoGpuError(f"devices {asked!r}: give {RANKS} GPU indices, one per rank")
    half = sms_per_gpu // RANKS
    if all(d < gpus for d in asked):
        if len(set(asked)) == RANKS:
            return Placement(asked, None, False, f"rank r on GPU {', '.join(map(str, asked))} (r = 0, 1)")
        return Placement(asked, half, True, f"loopback: both ranks on GPU {asked[0]} as asked, {half} SMs each; "
                                            "PyTorch runs both ranks in one process there (NCCL cannot place two "
                                            "ranks on one GPU)")
    if gpus == 1:
        return Placement((0, 0), half, True, f"this machine has one GPU, not GPUs {', '.join(map(str, asked))}: "
                                             f"loopback, both ranks on GPU 0 with {half} SMs each; PyTorch runs both "
                                             "ranks in one process there (NCCL cannot place two ranks on one GPU)")
    missing = [d for d in asked if d >= gpus]
    raise TwoGpuError(f"GPU {missing[0]} is not on this machine, which has {gpus} (0..{gpus - 1}): pick --devices "
                      "among them")


def gpu_facts() -> tuple[int, int]:
    """(GPUs visible, SMs of GPU 0)."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        return count, cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"] if count else 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no GPU: none visible
        return 0, 0


# --- times ------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Times:
    """Time per iteration, us: the median of the gaps between consecutive iterations' ends, with p10 and p90."""

    median_us: float
    p10_us: float
    p90_us: float
    samples: int

    @classmethod
    def of(cls, gaps_us) -> Times:
        gaps = np.asarray(gaps_us, np.float64)
        if gaps.size == 0:
            raise ValueError("no gaps to time: at least two iterations are needed")
        p10, p50, p90 = np.percentile(gaps, [10, 50, 90])
        return cls(float(p50), float(p10), float(p90), int(gaps.size))

    def scaled(self, by: float) -> Times:
        return Times(self.median_us * by, self.p10_us * by, self.p90_us * by, self.samples)

    def as_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        return f"{self.median_us:,.1f} us (p10 {self.p10_us:,.1f}, p90 {self.p90_us:,.1f})"


def slowest(per_rank: Sequence[Times]) -> Times:
    """The rank whose iterations took longest (the program's pace)."""
    return max(per_rank, key=lambda t: t.median_us)


# --- the World --------------------------------------------------------------------------------------------------------
def rounded(model, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inputs as the GPU holds them (rounded to each tensor's dtype), in float64, for the reference."""
    from ark_runtime.host_values import from_bits, to_bits

    by_name = {t.name: t for t in model.tensors}
    return {k: from_bits(by_name[k], to_bits(by_name[k], v)).astype(np.float64) for k, v in values.items()}


def world_gaps(wr, iterations: int) -> list[Times]:
    """Per rank, the gaps (us) between the ends of the last `iterations` iterations, by the GPU clock stamps each
    rank's kernel keeps (only the last RING iterations are kept)."""
    from ark_runtime.kernel.codes import RING

    keep = min(iterations, RING)
    out = []
    for rt in wr.ranks:
        stamps = rt.iteration_ns()[-keep:]
        out.append(Times.of(np.diff(stamps) / 1e3))
    return out


@dataclass
class WorldRun:
    outputs: list[dict[str, np.ndarray]]  # per rank, its outputs by name after one iteration
    times: Times | None  # the slower rank's time per iteration (None where the check failed)
    per_rank: list[Times] = field(default_factory=list)
    device: str = ""
    profiles: list = field(default_factory=list)  # per rank, Profile of the last timed iteration (with profile=True)


def run_world(world, placement: Placement, inputs: Sequence[dict[str, np.ndarray]], iterations: int,
              check: Callable[[list[dict[str, np.ndarray]]], bool], budget_s: float = 10.0, sms: int | None = None,
              profile: bool = False) -> WorldRun:
    """The World on WorldRuntime: inputs set, one iteration run and its outputs handed to `check`; where it passes,
    `iterations` more timed by the GPU clock (and, with `profile`, each rank's profile of the last). `sms`: each
    rank's SMs (default: the placement's)."""
    from ark_runtime.runtime.world_runtime import WorldRuntime

    names = [[m.tensors[o].name for o in m.outputs] for m in world.models]
    sms = placement.sms if sms is None else sms
    with WorldRuntime(world, list(placement.devices), sms=sms, budget_s=budget_s) as wr:
        for r, values in enumerate(inputs):
            for name, value in values.items():
                wr.set(r, name, value)
        wr.run(1)
        wr.wait(timeout=120)
        outputs = [{n: wr.get(r, n) for n in names[r]} for r in range(world.size)]
        run = WorldRun(outputs, None, device=wr.ranks[0].device_name)
        if not check(outputs):
            return run
        wr.run(iterations)
        wr.wait(timeout=120)
        run.per_rank = world_gaps(wr, iterations)
        run.times = slowest(run.per_rank)
        if profile:
            run.profiles = [_profile(rt) for rt in wr.ranks]
    return run


def _profile(rt):
    from ark_runtime.runtime import LoopError

    try:
        return rt.profile()
    except LoopError:  # a rank that runs no tile has no profile
        return None


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """Largest difference relative to the reference's scale (at least 1)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        got = got.reshape(want.shape)
    scale = max(1.0, float(np.abs(want).max()))
    return float(np.abs(got - want).max()) / scale


# --- PyTorch twins: one process per rank ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    """What each child runs: `function` of `module`, called as function(rank, world, device, args) (a torch.device),
    yielding picklable dicts; torch.distributed is set up first where world > 1."""

    module: str
    function: str
    args: dict


@dataclass
class GroupResult:
    items: list[list[dict]]  # per rank, what it yielded, in order
    error: str | None = None  # the first child's failure, or the timeout, where one happened


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(rank: int, world: int, device: int | None, backend: str, port: int, job: Job, out) -> None:
    keep_multicast_off()
    import torch
    import torch.distributed as dist

    try:
        dev = torch.device("cuda", device) if device is not None else torch.device("cpu")
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        if world > 1:
            kw = {"device_id": dev} if dev.type == "cuda" else {}
            dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                    timeout=_timedelta(120), **kw)
        fn = getattr(importlib.import_module(job.module), job.function)
        for item in fn(rank, world, dev, job.args):
            out.put(("item", rank, item))
        out.put(("done", rank, None))
    except BaseException:  # noqa: BLE001 - whatever went wrong goes to the parent, which names the rank
        out.put(("error", rank, traceback.format_exc(limit=6)[-3000:]))
    finally:
        if dist.is_available() and dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - the process ends anyway
                pass


def _timedelta(seconds: float):
    import datetime

    return datetime.timedelta(seconds=seconds)


def run_group(job: Job, devices: Sequence[int | None], backend: str = "nccl", timeout_s: float = 600.0,
              on_item: Callable[[int, dict], None] | None = None) -> GroupResult:
    """`job` in one spawned process per entry of `devices` (a GPU index, or None for the CPU with backend "gloo"),
    joined by torch.distributed where there are several; what they yield, and the first failure or the timeout (the
    children are then ended). `on_item(rank, item)` hears each item as it comes."""
    import torch.multiprocessing as mp

    keep_multicast_off()  # the children inherit the environment too
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    world, port = len(devices), _free_port()
    procs = [ctx.Process(target=_child, args=(r, world, d, backend, port, job, out), daemon=True)
             for r, d in enumerate(devices)]
    for p in procs:
        p.start()
    result = GroupResult([[] for _ in devices])
    done: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(done) < world:
            left = deadline - time.monotonic()
            if left <= 0:
                result.error = (f"the PyTorch processes did not finish within {timeout_s:.0f} s (ranks still "
                                f"running: {sorted(set(range(world)) - done)})")
                break
            try:
                kind, rank, item = out.get(timeout=min(left, 1.0))
            except queue_mod.Empty:
                dead = [r for r, p in enumerate(procs) if r not in done and not p.is_alive() and p.exitcode]
                if dead:
                    result.error = f"PyTorch rank {dead[0]} died with exit code {procs[dead[0]].exitcode}"
                    break
                continue
            if kind == "item":
                result.items[rank].append(item)
                if on_item:
                    on_item(rank, item)
            elif kind == "done":
                done.add(rank)
            else:
                result.error = f"PyTorch rank {rank} failed:\n{item}"
                break
    finally:
        for p in procs:
            p.join(timeout=10 if result.error is None else 2)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
            if p.is_alive():
                p.kill()
        out.close()
    return result


# --- timing inside a child ------------------------------------------------------------------------------------------
def event_gaps(torch, call: Callable[[], object], iterations: int) -> Times:
    """`call()` `iterations` times after WARMUP, an event recorded after each: the gaps between consecutive events
    (the first call's end to the last's), median, p10, p90, in us."""
    for _ in range(WARMUP):
        call()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(iterations + 1)]
    torch.cuda.synchronize()
    events[0].record()
    for e in events[1:]:
        call()
        e.record()
    events[-1].synchronize()
    return Times.of([a.elapsed_time(b) * 1e3 for a, b in zip(events, events[1:])])


def capture(torch, call: Callable[[], object]):
    """One call captured in a CUDA graph, after warm-up on a side stream (as PyTorch asks)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    torch.cuda.synchronize()
    return graph


def agreed(ok: bool, group) -> bool:
    """Whether every rank says ok (over `group`, a gloo group, so a rank whose CUDA work failed can still answer);
    ranks that would run collectives only where all can must agree first, or the others wait for ever."""
    import torch
    import torch.distributed as dist

    if group is None:
        return ok
    flag = torch.tensor([0 if ok else 1], dtype=torch.int32)
    dist.all_reduce(flag, group=group)
    return int(flag.item()) == 0


def time_twin(torch, call: Callable[[], object], iterations: int, group=None, barrier: Callable[[], None] = None
              ) -> dict | None:
    """A rank's program timed eagerly and as one CUDA graph replayed ({"eager": Times, "graph": Times or None,
    "graph_error": why not}); `barrier()` lines the ranks up before each timing; `group` (gloo) agrees on the graph.
    None with `iterations` 0 (a run that only checks what the program computes, on the CPU too)."""
    if iterations == 0:
        return None
    line_up = barrier or (lambda: None)
    line_up()
    eager = event_gaps(torch, call, iterations)
    graph, why = None, None
    try:
        captured = capture(torch, call)
    except Exception as exc:  # noqa: BLE001 - a program that cannot be captured is timed eagerly only
        captured, why = None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    if agreed(captured is not None, group):
        line_up()
        graph = event_gaps(torch, captured.replay, iterations)
    elif why is None:
        why = "another rank could not capture its program"
    return {"eager": eager.as_dict(), "graph": graph.as_dict() if graph else None, "graph_error": why}


def line_up(torch, dist) -> Callable[[], None]:
    """A barrier of the ranks (NCCL), then every queued GPU op done."""
    def barrier() -> None:
        dist.barrier()
        torch.cuda.synchronize()
    return barrier


def best_twin(items: Sequence[dict]) -> tuple[Times | None, Times | None, str | None]:
    """(eager, graph, why no graph) of the slower rank, from each rank's time_twin() dict."""
    eager = [Times(**i["times"]["eager"]) for i in items if i.get("times")]
    graphs = [Times(**i["times"]["graph"]) for i in items if i.get("times") and i["times"]["graph"]]
    why = next((i["times"]["graph_error"] for i in items if i.get("times") and i["times"]["graph_error"]), None)
    return (slowest(eager) if eager else None, slowest(graphs) if graphs and len(graphs) == len(eager) else None,
            why)


def twin_job(module: str, args: dict, placement: Placement) -> tuple[Job, list[int | None]]:
    """The twin's job and its processes' GPUs: torch_rank on each GPU, or torch_loopback once on the shared GPU."""
    if placement.loopback:
        return Job(module, "torch_loopback", args), [placement.devices[0]]
    return Job(module, "torch_rank", args), list(placement.devices)


def iterate_once(value: dict) -> Iterator[dict]:
    yield value


# --- one example, start to end --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Program:
    """One example's program in every form the comparison needs."""

    title: str  # what it is, for the printout
    module: str  # the example's module: its torch_rank and torch_loopback make the PyTorch twin
    world: object  # the World (ark_runtime.world.World)
    inputs: list  # per rank, {name: value} as set on the GPU
    want: list  # per rank, each of its model's outputs in order, float64 (the reference)
    dtype: str
    args: dict  # what the twin's processes are given (picklable): the config, seed and iterations


def torch_dtype(torch, dtype: str):
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]


def on_device(torch, values: dict[str, np.ndarray], dtype: str, device) -> dict:
    return {k: torch.tensor(np.asarray(v, np.float32), device=device).to(torch_dtype(torch, dtype))
            for k, v in values.items()}


def host(ts) -> list[np.ndarray]:
    return [t.detach().float().cpu().numpy() for t in ts]


def _worst(got: dict, want: list) -> float:
    """Largest error of any output of any rank in `got` ({rank: [arrays]})."""
    return max(rel_err(g, w) for r, outs in got.items() for g, w in zip(outs, want[int(r)]))


def compare(p: Program, placement: Placement, iterations: int, twin_timeout_s: float = 600.0,
            say: Callable[[str], None] = print) -> int:
    """The PyTorch twin, then the World, each checked against the float64 reference and timed; prints both and
    returns 0 where both computed what the reference does."""
    tol = TOLERANCE[p.dtype]
    say(p.title)
    say(f"placement: {placement.describe()}")
    job, devices = twin_job(p.module, p.args, placement)
    what = "PyTorch (both ranks in one process, no NCCL)" if placement.loopback else "PyTorch + NCCL"
    group = run_group(job, devices, "nccl", twin_timeout_s)
    twin_ok, twin_best = False, None
    if group.error:
        say(f"{what}: failed: {group.error}")
    else:
        items = [i for per in group.items for i in per]
        got = {int(r): outs for i in items for r, outs in i["outs"].items()}
        err = _worst(got, p.want)
        twin_ok = err <= tol
        eager, graph, why = best_twin(items)
        twin_best = min((t for t in (eager, graph) if t), key=lambda t: t.median_us, default=None)
        say(f"{what}: eager {eager.text() if eager else '-'}, CUDA graph "
            f"{graph.text() if graph else '- (' + str(why) + ')'} per iteration (CUDA events, the slower rank); "
            f"largest error {err:.2e} of the output's scale ({'ok' if twin_ok else 'WRONG'}, allowed {tol:.0e})")
    errs: list[float] = []

    def check(outputs: list[dict[str, np.ndarray]]) -> bool:
        got = {r: list(outs.values()) for r, outs in enumerate(outputs)}
        errs.append(_worst(got, p.want))
        return errs[-1] <= tol

    run = run_world(p.world, placement, p.inputs, iterations, check)
    ok = errs[-1] <= tol
    say(f"arkdma World on {run.device}: largest error {errs[-1]:.2e} of the output's scale "
        f"({'ok' if ok else 'WRONG: not timed'}, allowed {tol:.0e})")
    if run.times:
        say(f"arkdma World: {run.times.text()} per iteration (GPU clock stamps, the slower rank, "
            f"{run.times.samples} gaps)")
        if twin_best:
            say(f"arkdma / best PyTorch: {run.times.median_us / twin_best.median_us:.2f}x the time "
                f"({twin_best.median_us / run.times.median_us:.2f}x speed)")
    return 0 if ok and twin_ok else 1


def example_arguments(parser, iterations: int = 64) -> None:
    """The arguments every communication example takes."""
    parser.add_argument("--devices", default="0,1", help="GPU of rank 0 and rank 1 (default 0,1; 0,0 shares GPU 0, "
                                                         "a loopback; one GPU on the machine: loopback on it)")
    parser.add_argument("--iterations", type=int, default=iterations,
                        help=f"iterations timed on each side (default {iterations}; the World's clock stamps keep the "
                             "last 64)")
    parser.add_argument("--tiny", action="store_true", help="small shapes: a quick run")
    parser.add_argument("--seed", type=int, default=0, help="of the random inputs (default 0)")


def checked_arguments(parser, argv) -> tuple:
    """(args, devices) with the shared arguments checked; parser.error() on bad ones."""
    args = parser.parse_args(argv)
    try:
        devices = parse_devices(args.devices)
    except ValueError as exc:
        parser.error(str(exc))
    if args.iterations < 2:
        parser.error(f"--iterations must be at least 2 (time is the gap between iterations), not {args.iterations}")
    return args, devices


def placed(devices: tuple[int, ...]) -> Placement:
    count, sms = gpu_facts()
    return place(devices, count, sms)


def sized(parser, args, cfg, names: Sequence[str]):
    """`cfg` with each of `names` the command line gave (a positive int) put in; parser.error() on one below 1."""
    for name in names:
        value = getattr(args, name)
        if value is not None:
            if value < 1:
                parser.error(f"--{name} must be at least 1, not {value}")
            cfg = type(cfg)(**{**asdict(cfg), name: value})
    return cfg


def run_example(name: str, argv, parse: Callable, program: Callable) -> int:
    """A communication example's main(): its arguments (`parse` gives args, devices, cfg), multicast off, its World
    and its PyTorch twin run and compared; what fails is one line on stderr and exit status 1."""
    args, devices, cfg = parse(argv)
    keep_multicast_off()
    from ark_runtime.model import ModelError
    from ark_runtime.runtime import LoopError
    from driver.errors import ArkdmaError

    try:
        placement = placed(devices)
        return compare(program(cfg, args.seed, args.iterations), placement, args.iterations)
    except (TwoGpuError, LoopError, ModelError, ArkdmaError) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1


def timed_rank(torch, dist, step: Callable[[], object], rank: int, iterations: int) -> dict:
    """One rank's twin item: `step`'s outputs once (NumPy), then its time with the ranks lined up before each call."""
    with torch.no_grad():
        outs = host(step())
        times = time_twin(torch, step, iterations, dist.new_group(backend="gloo"), line_up(torch, dist))
    return {"outs": {rank: outs}, "times": times}


def timed_loopback(torch, whole: Callable[[], list], iterations: int) -> dict:
    """Both ranks' twin item from one process (`whole()`: each rank's outputs): its outputs once, then its time."""
    with torch.no_grad():
        outs = {r: host(o) for r, o in enumerate(whole())}
        times = time_twin(torch, whole, iterations)
    return {"outs": outs, "times": times}


def float64_outputs(whole: Callable, values: Sequence[dict[str, np.ndarray]], iterations: int = 1) -> list[list]:
    """Every rank's outputs in float64 (PyTorch on the CPU) after `iterations` runs of whole(torch, tensors), from
    `values` (each rank's inputs as the GPU holds them; copied, so a step that updates weights leaves them be)."""
    import torch

    t = [{k: torch.tensor(np.asarray(v, np.float64)) for k, v in vals.items()} for vals in values]
    with torch.no_grad():
        for _ in range(iterations):
            outs = whole(torch, t)
        return [[o.numpy() for o in per] for per in outs]
