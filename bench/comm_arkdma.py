"""The arkdma side of `arkdma bench comm`: each case's World (bench/comm_worlds.py, or the TP block of
examples/tensor_parallel.py) run on WorldRuntime, checked after one iteration, then timed by the GPU clock stamps
each rank's kernel keeps (Runtime.iteration_ns: the gaps between the ends of consecutive iterations, median, p10,
p90), as `arkdma bench loop` times one GPU.

`measure(case, placement, iterations)` returns a dict: "times" (examples.two_gpus.Times as a dict, of one timed unit:
one one-way put, one all-reduce, one burst, one iteration), "per_rank" (each rank's time per iteration), "detail";
an overlap case "t_compute_us", "t_comm_us", "t_concurrent_us" and the matmuls' spans; the TP block its
"max_rel_err". Which rank's clock: a ping-pong's and a burst's, rank 0 (it starts each round trip; a burst's
receiver runs no tile), otherwise the slower rank."""

from __future__ import annotations

from examples import two_gpus

from bench import comm_worlds as cw


class WrongResult(RuntimeError):
    """A World computed something else than it must: the case is not timed; the message says where."""


def _bench(case: dict) -> cw.Bench:
    op = case["op"]
    if op == "put":
        return cw.ping_pong(case["bytes"])
    if op == "all_reduce":
        return cw.all_reduce_pair(case["bytes"])
    if op == "put_rate":
        return cw.put_burst(case["count"], case["bytes"])
    raise ValueError(f"no World for case {op!r}")


def _run(bench: cw.Bench, placement, iterations: int, budget_s: float, sms: int | None = None,
         profile: bool = False) -> two_gpus.WorldRun:
    bad: list[str] = []

    def check(got) -> bool:
        bad.extend(cw.mismatches(bench, got))
        return not bad
    run = two_gpus.run_world(bench.world, placement, bench.inputs, iterations, check, budget_s, sms, profile)
    if bad:
        raise WrongResult("; ".join(bad[:3]))
    return run


def measure(case: dict, placement, iterations: int, budget_s: float = 10.0) -> dict:
    op = case["op"]
    if op == "overlap":
        return _overlap(case, placement, iterations, budget_s)
    if op == "tp_block":
        return _tp_block(case, placement, iterations, budget_s)
    bench = _bench(case)
    sms = case.get("sms")
    if sms is not None and placement.sms is not None:
        sms = min(sms, placement.sms)
    run = _run(bench, placement, iterations, budget_s, sms)
    timed = run.per_rank[0] if op in ("put", "put_rate") else run.times
    return {"times": timed.scaled(1 / bench.per_iteration).as_dict(), "per_rank": [t.as_dict() for t in run.per_rank],
            "detail": {**bench.detail, "timed_rank": 0 if op in ("put", "put_rate") else "slower",
                       "sms_per_rank": sms or placement.sms, "device": run.device}}


def matmul_span_us(profile) -> float | None:
    """The first matmul tile's start to the last one's end in a rank's profiled iteration."""
    if profile is None:
        return None
    ops = [o for o in profile.ops if o.what.startswith("matmul")]
    if not ops:
        return None
    return max(o.start_us + o.span_us for o in ops) - min(o.start_us for o in ops)


def _overlap(case: dict, placement, iterations: int, budget_s: float) -> dict:
    runs = {}
    for part in cw.OVERLAP_PARTS:
        bench = cw.overlap(part, case["matmul_n"], case["matmuls"], case["bytes"])
        runs[part] = _run(bench, placement, iterations, budget_s, profile=part != "comm")
    alone, both = (matmul_span_us(runs[p].profiles[0]) for p in ("compute", "both"))
    return {"t_compute_us": runs["compute"].times.median_us, "t_comm_us": runs["comm"].times.median_us,
            "t_concurrent_us": runs["both"].times.median_us, "times": runs["both"].times.as_dict(),
            "matmul_span_alone_us": alone, "matmul_span_concurrent_us": both,
            "per_rank": {p: [t.as_dict() for t in r.per_rank] for p, r in runs.items()},
            "detail": {"device": runs["both"].device, "matmul_span_from": "rank 0's profile of its last iteration"}}


def _tp_block(case: dict, placement, iterations: int, budget_s: float) -> dict:
    from examples import tensor_parallel

    cfg = tensor_parallel.Config(**case["cfg"])
    p = tensor_parallel.program(cfg, case["seed"], iterations)
    errs: list[float] = []

    def check(got) -> bool:
        errs.append(max(two_gpus.rel_err(g, w) for r, outs in enumerate(got) for g, w in zip(outs.values(),
                                                                                             p.want[r])))
        return errs[-1] <= two_gpus.TOLERANCE[cfg.dtype]
    run = two_gpus.run_world(p.world, placement, p.inputs, iterations, check, budget_s)
    if run.times is None:
        raise WrongResult(f"the TP block's largest error is {errs[-1]:.2e} of the output's scale (allowed "
                          f"{two_gpus.TOLERANCE[cfg.dtype]:.0e})")
    return {"times": run.times.as_dict(), "per_rank": [t.as_dict() for t in run.per_rank], "max_rel_err": errs[-1],
            "detail": {"device": run.device, "title": p.title}}
