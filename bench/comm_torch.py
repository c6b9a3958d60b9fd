"""The baselines of `arkdma bench comm`: the same transfers in PyTorch, one process per GPU joined by
torch.distributed's NCCL backend (examples/two_gpus.py spawns them), plus PyTorch's symmetric-memory all-reduce.

`baselines(rank, world, device, args)` runs in each child and yields one dict per case, as soon as it is measured:
{"case": [op, bytes], "rank": r, ...} with the times (examples.two_gpus.Times as dicts) of one call, or "error".
How each case is timed (CUDA events between consecutive calls, after warm-up; eagerly and as a CUDA graph replayed,
the ranks lined up by a barrier first):
- put: rank 0 send()s x to rank 1, which recv()s it and send()s it back: a call is one round trip (two one-way).
- all_reduce: one torch.distributed.all_reduce a call (nccl-tests' back-to-back loop); symmetric memory: a buffer
  from torch.distributed._symmetric_memory.empty, rendezvoused, then torch.ops.symm_mem.two_shot_all_reduce_ (in
  place) or one_shot_all_reduce_out a call, multicast off.
- put_rate: rank 0 batch_isend_irecv()s `count` isends of `bytes` each, rank 1 as many irecvs: a call is the burst.
- overlap: as `arkdma bench interference` times it, on each rank: the matmul loop alone on the current stream, the
  all_reduce alone on a side stream, then both at once (the later end), `repeats` times interleaved, medians.
- tp_block: examples/tensor_parallel.py's rank program (two all_reduces), its output returned for the check.
Buffers hold zeros (sums stay zero, so repeated all-reduces never overflow)."""

from __future__ import annotations

import statistics
import traceback
import warnings

from examples import two_gpus


def baselines(rank: int, world: int, device, args: dict):
    import torch
    import torch.distributed as dist

    gloo = dist.new_group(backend="gloo")
    barrier = two_gpus.line_up(torch, dist)
    for case in args["cases"]:
        head = {"case": [case["op"], case["bytes"]], "rank": rank}
        try:
            fn = CASES[case["op"]]
            with torch.no_grad():
                yield {**head, **fn(torch, dist, rank, device, case, args["iterations"], gloo, barrier)}
        except Exception:  # noqa: BLE001 - one case's failure is its row's, the others go on
            yield {**head, "error": traceback.format_exc(limit=4)[-1500:]}


def _put(torch, dist, rank, device, case, iterations, gloo, barrier) -> dict:
    n = case["bytes"] // 4
    x = torch.zeros(n, dtype=torch.float32, device=device)
    buf = torch.empty_like(x)

    def call():
        if rank == 0:
            dist.send(x, 1)
            dist.recv(buf, 1)
        else:
            dist.recv(buf, 0)
            dist.send(buf, 0)
    return {"nccl": two_gpus.time_twin(torch, call, iterations, gloo, barrier), "per_call": 2}


def _all_reduce(torch, dist, rank, device, case, iterations, gloo, barrier) -> dict:
    n = case["bytes"] // 2
    x = torch.zeros(n, dtype=torch.bfloat16, device=device)
    out = {"nccl": two_gpus.time_twin(torch, lambda: dist.all_reduce(x), iterations, gloo, barrier), "per_call": 1,
           "symm": {}}
    for algorithm, times in _symmetric(torch, dist, device, n, iterations, gloo, barrier):
        out["symm"][algorithm] = times
    return out


def _symmetric(torch, dist, device, n: int, iterations: int, gloo, barrier):
    """(algorithm, time_twin dict or {"error": why}) for each symmetric-memory all-reduce that runs here."""
    try:
        import torch.distributed._symmetric_memory as symm_mem

        group = dist.group.WORLD.group_name
        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
        if enable is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # deprecated where it is no longer needed
                enable(group)
        buf = symm_mem.empty(n, dtype=torch.bfloat16, device=device)
        buf.zero_()
        symm_mem.rendezvous(buf, group)
        out = torch.empty_like(buf)
    except Exception as exc:  # noqa: BLE001 - no symmetric memory here: said in the row
        yield "two_shot", {"error": f"{type(exc).__name__}: {exc}"[:300]}
        return
    calls = {"two_shot": lambda: torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", group),
             "one_shot": lambda: torch.ops.symm_mem.one_shot_all_reduce_out(buf, "sum", group, out)}
    for algorithm, call in calls.items():
        ok = True
        try:
            call()
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001
            ok, why = False, f"{type(exc).__name__}: {exc}"[:300]
        if not two_gpus.agreed(ok, gloo):  # both ranks time it, or neither (a lone rank would wait for ever)
            yield algorithm, {"error": why if not ok else "another rank could not run it"}
            continue
        yield algorithm, two_gpus.time_twin(torch, call, iterations, gloo, barrier)


def _put_rate(torch, dist, rank, device, case, iterations, gloo, barrier) -> dict:
    count, n = case["count"], case["bytes"] // 4
    x = torch.zeros(n, dtype=torch.float32, device=device)
    bufs = [torch.empty_like(x) for _ in range(count)]
    if rank == 0:
        ops = [dist.P2POp(dist.isend, x, 1, tag=j) for j in range(count)]
    else:
        ops = [dist.P2POp(dist.irecv, bufs[j], 0, tag=j) for j in range(count)]

    def call():
        for req in dist.batch_isend_irecv(ops):
            req.wait()
    return {"nccl": two_gpus.time_twin(torch, call, iterations, gloo, barrier), "per_call": 1}


def _overlap(torch, dist, rank, device, case, iterations, gloo, barrier) -> dict:
    n, count, repeats = case["matmul_n"], case["matmuls"], case["repeats"]
    g = torch.Generator(device=device).manual_seed(rank)
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=g)
    c = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    x = torch.zeros(case["bytes"] // 2, dtype=torch.bfloat16, device=device)
    main, side = torch.cuda.current_stream(), torch.cuda.Stream()

    def timed(matmuls: bool, comm: bool) -> tuple[float, float]:
        barrier()
        e0, ea, eb = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        e0.record(main)
        side.wait_event(e0)
        if matmuls:
            for _ in range(count):
                torch.matmul(a, b, out=c)
        if comm:
            with torch.cuda.stream(side):
                dist.all_reduce(x)
        ea.record(main)
        eb.record(side)
        ea.synchronize()
        eb.synchronize()
        return e0.elapsed_time(ea) * 1e3, e0.elapsed_time(eb) * 1e3

    timed(True, False)  # warm-up: cuBLAS, NCCL's buffers, clocks
    timed(False, True)
    compute, comm, both = [], [], []
    for _ in range(repeats):  # interleaved, so clock drift under load hits all three alike
        compute.append(timed(True, False)[0])
        comm.append(timed(False, True)[1])
        both.append(timed(True, True))
    return {"t_compute_us": statistics.median(compute), "t_comm_us": statistics.median(comm),
            "t_concurrent_us": statistics.median(max(t) for t in both),
            "t_matmul_concurrent_us": statistics.median(t[0] for t in both)}


def _tp_block(torch, dist, rank, device, case, iterations, gloo, barrier) -> dict:
    from examples import tensor_parallel

    cfg = tensor_parallel.Config(**case["cfg"])
    t = two_gpus.on_device(torch, tensor_parallel.inputs(cfg, case["seed"], rank), cfg.dtype, device)
    step = tensor_parallel.rank_step(torch, dist, t, cfg, rank)
    out = two_gpus.host(step())
    return {"nccl": two_gpus.time_twin(torch, step, iterations, gloo, barrier), "per_call": 1, "out": out[0]}


CASES = {"put": _put, "all_reduce": _all_reduce, "put_rate": _put_rate, "overlap": _overlap, "tp_block": _tp_block}
