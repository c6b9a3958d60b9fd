"""`arkdma bench comm`: communication from inside the loop kernel (a World on WorldRuntime) beside NCCL through
torch.distributed and PyTorch's symmetric-memory all-reduce, measured in the same run on the same GPUs.

Cases (each a row; `path` "sm": the loop kernel's SMs store into the peer's memory and push the flag after the
data):
- put, 8 B to 64 MiB: one-way latency of a put + flag. A ping-pong World (rank 0 puts x to rank 1, whose op reads
  it and puts it back): rank 0's time per iteration is one round trip, and one way is half of it. NCCL: send/recv
  ping-pong, half a round trip.
- all_reduce, 8 KiB to 256 MiB (bf16): time of one all-reduce, half an iteration of two (the second of the first's
  result, so each waits on what the other GPU's last one wrote: bench/comm_worlds.py says why two), and bus
  bandwidth as nccl-tests define it, busbw = 2(n-1)/n x bytes / time. NCCL: one torch.distributed.all_reduce a call,
  back to back; symmetric memory: two-shot and one-shot (symm_us is the faster, symm_algorithm says which).
- put_rate: 64 back-to-back 8 KiB puts from rank 0 to rank 1 a burst (rank 0's kernel on 4 SMs), GB/s and messages a
  second. NCCL: 64 isends (batch_isend_irecv) a burst.
- overlap: a 256 MiB all-reduce beside a bf16 matmul loop on each GPU, % of ideal speedup as `arkdma bench
  interference` defines it, (T_serial - T_concurrent) / (T_serial - max(T_compute, T_comm)) x 100, and the matmuls'
  slowdown (arkdma: the matmul tiles' span in rank 0's profiled iteration with and without the all-reduce; NCCL: the
  matmul stream's time with and without). arkdma's three times are per iteration of three Worlds (matmuls, the
  all-reduce, both); NCCL's as bench/comm_torch.py says.
- tp_block: examples/tensor_parallel.py's TP=2 block (GPT-2 XL's shape; --quick: its tiny one) end to end.

arkdma's times are by the GPU clock stamps each rank's kernel keeps (bench/comm_arkdma.py); PyTorch's by CUDA events
between consecutive calls (examples/two_gpus.py), eager and in a CUDA graph, `nccl_us` the faster of the two
(`nccl_how`); medians with p10 and p90. The PyTorch processes run first and have exited before any World starts
(resident loop kernels would hold the SMs NCCL needs). With one GPU both ranks share it (a loopback World, half the
SMs each, `"loopback": true`); NCCL cannot put two ranks on one GPU, so the baselines are left out then. A case that
fails keeps its row, with the error; each row is saved as soon as it is measured (on_row)."""

from __future__ import annotations

import traceback
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

from examples import two_gpus

KiB, MiB = 1 << 10, 1 << 20
OPS = ("put", "all_reduce", "put_rate", "overlap", "tp_block")
RANKS = 2


@dataclass(frozen=True)
class CommConfig:
    ops: tuple[str, ...] = OPS
    put_sizes: tuple[int, ...] = (8, 64, 512, 4 * KiB, 8 * KiB, 64 * KiB, 512 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB)
    all_reduce_sizes: tuple[int, ...] = (8 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB)
    rate_count: int = 64
    rate_bytes: int = 8 * KiB
    rate_sms: int = 4  # the sender's SMs for the burst
    overlap_bytes: int = 256 * MiB
    matmul_n: int = 4096
    matmuls: int = 6  # about as long as the 256 MiB all-reduce on an H200 (0.2 ms a matmul)
    overlap_repeats: int = 5  # PyTorch's interleaved timings (arkdma's: `iterations` of each World)
    tp_tiny: bool = False  # the TP block at examples/tensor_parallel.py's tiny shape rather than GPT-2 XL's
    iterations: int = 64  # timed on each side (the World's clock stamps keep the last 64)
    devices: tuple[int, ...] = (0, 1)
    baselines: bool = True  # PyTorch + NCCL and symmetric memory beside arkdma
    baseline_timeout_s: float = 420.0
    budget_s: float = 10.0  # a World's wait budget (a peer that never signals faults within it)


QUICK = dict(put_sizes=(8, 8 * KiB, MiB), all_reduce_sizes=(8 * KiB, MiB, 16 * MiB), overlap_bytes=64 * MiB,
             matmuls=2, overlap_repeats=3, tp_tiny=True, iterations=32, baseline_timeout_s=150.0)


def quick(config: CommConfig) -> CommConfig:
    return replace(config, **QUICK)


def tp_config(config: CommConfig):
    from examples import tensor_parallel

    return tensor_parallel.TINY if config.tp_tiny else tensor_parallel.Config()


def cases(config: CommConfig) -> list[dict]:
    """Every case of `config`, as plain dicts (the PyTorch processes get them too)."""
    out = []
    for op in config.ops:
        if op == "put":
            out += [{"op": op, "bytes": b} for b in config.put_sizes]
        elif op == "all_reduce":
            out += [{"op": op, "bytes": b} for b in config.all_reduce_sizes]
        elif op == "put_rate":
            out.append({"op": op, "bytes": config.rate_bytes, "count": config.rate_count, "sms": config.rate_sms})
        elif op == "overlap":
            out.append({"op": op, "bytes": config.overlap_bytes, "matmul_n": config.matmul_n,
                        "matmuls": config.matmuls, "repeats": config.overlap_repeats})
        elif op == "tp_block":
            cfg = tp_config(config)
            moved = 2 * cfg.batch * cfg.seq * cfg.hidden * 2  # two bf16 all-reduces of the block's activations
            out.append({"op": op, "bytes": moved, "cfg": asdict(cfg), "seed": 0})
        else:
            raise ValueError(f"op {op!r} is not one of {', '.join(OPS)}")
    return out


def case_key(case: dict) -> tuple[str, int]:
    return case["op"], case["bytes"]


# --- rows ---------------------------------------------------------------------------------------------------------
@dataclass
class Row:
    op: str
    bytes: int
    path: str = "sm"
    arkdma_us: float | None = None
    arkdma_p10_us: float | None = None
    arkdma_p90_us: float | None = None
    nccl_us: float | None = None  # the faster of eager and CUDA graph (nccl_how)
    nccl_p10_us: float | None = None
    nccl_p90_us: float | None = None
    nccl_how: str | None = None
    nccl_eager_us: float | None = None
    nccl_graph_us: float | None = None
    symm_us: float | None = None  # all_reduce: PyTorch's symmetric memory, the faster algorithm (symm_algorithm)
    symm_algorithm: str | None = None
    arkdma_gbps: float | None = None  # put: bytes / one way; all_reduce: bus bandwidth; put_rate: the burst's bytes/s
    nccl_gbps: float | None = None
    symm_gbps: float | None = None
    pct_of_ideal: float | None = None  # overlap rows
    nccl_pct_of_ideal: float | None = None
    matmul_slowdown_pct: float | None = None
    nccl_matmul_slowdown_pct: float | None = None
    speedup: float | None = None  # nccl_us / arkdma_us
    max_rel_err: float | None = None
    error: str | None = None  # the arkdma side's failure
    nccl_error: str | None = None  # the baseline's failure (or why there is none)
    detail: dict = field(default_factory=dict)


def gbps(nbytes: float, us: float | None) -> float | None:
    return None if not us else nbytes / us / 1e3


def busbw_gbps(nbytes: int, us: float | None, ranks: int = RANKS) -> float | None:
    """nccl-tests' bus bandwidth of an all-reduce: 2(n-1)/n x bytes / time."""
    return None if not us else 2 * (ranks - 1) / ranks * nbytes / us / 1e3


def _rate(op: str, nbytes: int, us: float | None, case: dict) -> float | None:
    if op == "put":
        return gbps(nbytes, us)
    if op == "all_reduce":
        return busbw_gbps(nbytes, us)
    if op == "put_rate":
        return gbps(nbytes * case["count"], us)
    return None


def _pct(t_compute: float, t_comm: float, t_concurrent: float) -> float | None:
    from bench.interference import pct_of_ideal

    try:
        return pct_of_ideal(t_compute, t_comm, t_concurrent)
    except ValueError:
        return None


def _twin(per_rank: list[dict], key: str = "nccl") -> dict:
    """The slower rank's eager and graph times of one call (each time_twin dict under `key`), per unit."""
    eager, graph = [], []
    per_call = per_rank[0].get("per_call", 1)
    for item in per_rank:
        t = item[key] if key in item else item
        eager.append(two_gpus.Times(**t["eager"]))
        if t.get("graph"):
            graph.append(two_gpus.Times(**t["graph"]))
    e = two_gpus.slowest(eager).scaled(1 / per_call)
    g = two_gpus.slowest(graph).scaled(1 / per_call) if len(graph) == len(eager) else None
    best, how = (g, "graph") if g and g.median_us < e.median_us else (e, "eager")
    why = next((i[key].get("graph_error") for i in per_rank if key in i and i[key].get("graph_error")), None)
    return {"best": best, "how": how, "eager": e.median_us, "graph": g.median_us if g else None, "why": why}


def make_row(case: dict, ark: dict | None, base: list[dict] | None, base_error: str | None = None) -> Row:
    """A case's row from the arkdma side (measure()'s dict, or {"error": ...}) and each rank's baseline item (or why
    there is none)."""
    op, nbytes = case["op"], case["bytes"]
    row = Row(op, nbytes, detail={k: v for k, v in case.items() if k not in ("op", "bytes", "cfg")})
    if ark is not None and "error" in ark:
        row.error = ark["error"]
    elif ark is not None:
        t = two_gpus.Times(**ark["times"])
        row.arkdma_us, row.arkdma_p10_us, row.arkdma_p90_us = t.median_us, t.p10_us, t.p90_us
        row.arkdma_gbps = _rate(op, nbytes, t.median_us, case)
        row.max_rel_err = ark.get("max_rel_err")
        row.detail.update(ark.get("detail", {}))
        if op == "overlap":
            row.detail.update({k: ark[k] for k in ("t_compute_us", "t_comm_us", "t_concurrent_us",
                                                   "matmul_span_alone_us", "matmul_span_concurrent_us")})
            row.pct_of_ideal = _pct(ark["t_compute_us"], ark["t_comm_us"], ark["t_concurrent_us"])
            alone, both = ark["matmul_span_alone_us"], ark["matmul_span_concurrent_us"]
            if alone and both:
                row.matmul_slowdown_pct = (both / alone - 1) * 100
    errors = [i["error"] for i in base or [] if "error" in i]
    if base_error or errors or not base:
        row.nccl_error = base_error or (errors[0] if errors else "no baseline was measured")
    elif op == "overlap":
        worst = {k: max(i[k] for i in base) for k in ("t_compute_us", "t_comm_us", "t_concurrent_us",
                                                      "t_matmul_concurrent_us")}
        row.nccl_us = worst["t_concurrent_us"]
        row.nccl_pct_of_ideal = _pct(worst["t_compute_us"], worst["t_comm_us"], worst["t_concurrent_us"])
        row.nccl_matmul_slowdown_pct = (worst["t_matmul_concurrent_us"] / worst["t_compute_us"] - 1) * 100
        row.detail["nccl"] = worst
    else:
        twin = _twin(base)
        best = twin["best"]
        row.nccl_us, row.nccl_p10_us, row.nccl_p90_us = best.median_us, best.p10_us, best.p90_us
        row.nccl_how, row.nccl_eager_us, row.nccl_graph_us = twin["how"], twin["eager"], twin["graph"]
        row.nccl_gbps = _rate(op, nbytes, best.median_us, case)
        if twin["why"]:
            row.detail["nccl_graph_error"] = twin["why"]
        if op == "all_reduce":
            _symm(row, base, case)
    if row.arkdma_us and row.nccl_us:
        row.speedup = row.nccl_us / row.arkdma_us
    return row


def _symm(row: Row, base: list[dict], case: dict) -> None:
    algorithms = set.intersection(*(set(i.get("symm", {})) for i in base))
    found = {}
    for name in sorted(algorithms):
        per = [i["symm"][name] for i in base]
        bad = [p["error"] for p in per if "error" in p]
        if bad:
            row.detail[f"symm_{name}_error"] = bad[0]
            continue
        found[name] = _twin([{"symm": p, "per_call": 1} for p in per], "symm")
        row.detail[f"symm_{name}_us"] = found[name]["best"].median_us
    if found:
        name = min(found, key=lambda n: found[n]["best"].median_us)
        row.symm_us, row.symm_algorithm = found[name]["best"].median_us, name
        row.symm_gbps = busbw_gbps(row.bytes, row.symm_us)


# --- the run -------------------------------------------------------------------------------------------------------
@dataclass
class CommResult:
    device: str
    devices: list[int]
    loopback: bool
    config: dict
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    torch: str | None = None
    baselines: list[dict] = field(default_factory=list)  # each rank's raw baseline items, as they came
    complete: bool = False

    def as_json(self) -> dict:
        return {"device": self.device, "devices": self.devices, "loopback": self.loopback, "torch": self.torch,
                "config": self.config, "complete": self.complete, "notes": self.notes,
                "rows": [asdict(r) for r in self.rows],
                "baselines": [{k: v for k, v in b.items() if k != "out"} for b in self.baselines]}


def _device_name(devices) -> str:
    try:
        import cupy

        name = cupy.cuda.runtime.getDeviceProperties(devices[0])["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - no GPU: the row errors say so
        return "unknown"


def _torch_version() -> str | None:
    try:
        import torch

        return torch.__version__
    except ImportError:
        return None


def _tp_nccl_check(config: CommConfig, items: list[dict]) -> float | None:
    """The TP block's baseline output against the float64 reference (largest error of the output's scale)."""
    from examples import tensor_parallel

    outs = {i["rank"]: i["out"] for i in items if "out" in i}
    if len(outs) != RANKS:
        return None
    cfg = tp_config(config)
    p = tensor_parallel.program(cfg, 0, 0)
    return max(two_gpus.rel_err(outs[r], p.want[r][0]) for r in range(RANKS))


def run(config: CommConfig, progress: Callable[[str], None] | None = None,
        on_row: Callable[[CommResult], None] | None = None, *, placement: two_gpus.Placement | None = None,
        arkdma: Callable | None = None, baselines: Callable | None = None) -> CommResult:
    """Every case of `config`: the baselines first (PyTorch processes, all cases), then each case's World, its row
    appended and `on_row(result)` called as soon as it is measured. `placement`, `arkdma(case, placement,
    iterations, budget_s) -> dict` and `baselines(cases, placement, config, on_item) -> GroupResult` stand in for the
    GPU in tests."""
    from bench import comm_arkdma

    say = progress or (lambda what: None)
    two_gpus.keep_multicast_off()
    todo = cases(config)
    placement = placement or two_gpus.placed(config.devices)
    result = CommResult(_device_name(placement.devices), list(placement.devices), placement.loopback, asdict(config),
                        torch=_torch_version())
    result.notes.append(f"placement: {placement.describe()}")
    saved = on_row or (lambda r: None)
    base: dict[tuple[str, int], list[dict]] = {}
    base_error = None
    if placement.loopback:
        base_error = "NCCL cannot place two ranks on one GPU: the baselines need two GPUs"
        result.notes.append(f"loopback: {base_error}")
    elif not config.baselines:
        base_error = "baselines left out (--no-baselines)"
    else:
        say(f"PyTorch + NCCL: {len(todo)} cases in {RANKS} processes")

        def heard(rank: int, item: dict) -> None:
            result.baselines.append(item)
            base.setdefault(tuple(item["case"]), []).append(item)
            say(f"PyTorch rank {rank}: {item['case'][0]} {item['case'][1]} B")
            saved(result)
        group = (baselines or _baselines)(todo, placement, config, heard)
        if group.error:
            base_error = f"the PyTorch processes failed: {group.error.splitlines()[-1][:400]}"
            result.notes.append(f"PyTorch + NCCL: {group.error[-2000:]}")
    measure = arkdma or comm_arkdma.measure
    for case in todo:
        say(f"arkdma: {case['op']} {case['bytes']} B")
        try:
            ark = measure(case, placement, config.iterations, config.budget_s)
        except Exception as exc:  # noqa: BLE001 - the row keeps the error, the run goes on
            ark = {"error": f"{type(exc).__name__}: {str(exc)[:600]}",
                   "trace": traceback.format_exc(limit=3)[-1500:]}
        items = base.get(case_key(case))
        if case["op"] == "tp_block" and items and all("out" in i for i in items):
            try:
                case = {**case, "nccl_max_rel_err": _tp_nccl_check(config, items)}
            except Exception as exc:  # noqa: BLE001
                result.notes.append(f"tp_block: the baseline's output could not be checked: {exc}")
        row = make_row(case, ark, items, None if items else base_error)
        if "trace" in ark:
            row.detail["trace"] = ark["trace"]
        result.rows.append(row)
        saved(result)
    result.complete = True
    saved(result)
    return result


def _baselines(todo: list[dict], placement, config: CommConfig, heard) -> two_gpus.GroupResult:
    job = two_gpus.Job("bench.comm_torch", "baselines", {"cases": todo, "iterations": config.iterations})
    return two_gpus.run_group(job, list(placement.devices), "nccl", config.baseline_timeout_s, heard)
