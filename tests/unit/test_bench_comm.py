"""`arkdma bench comm` without a GPU: its arguments and refusals, its cases, the Worlds it times (built, joined,
lowered, each rank's kernel compiled, evaluated to what they must compute), and rows, JSON, table and plot made from
injected timings, with each row saved as measured and a failing row kept with its error. The measuring itself runs in
tests/gpu/test_bench_comm.py."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from arkdma_cli.bench import COMM_OPS, comm_table
from arkdma_cli.main import main
from bench import comm
from bench import comm_worlds as cw
from bench.comm_arkdma import matmul_span_us
from bench.comm_plot import plot
from bench.interference import pct_of_ideal
from examples.two_gpus import GroupResult, Placement, Times

TWO = Placement((0, 1), None, False, "rank r on GPU 0, 1")
LOOP = Placement((0, 0), 66, True, "loopback")


# --- arguments --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, says", [
    (["--ops", "put,zap"], "unknown op(s) zap; choose from put, all_reduce, put_rate, overlap, tp_block"),
    (["--ops", ","], r"unknown op(s) (none given)"),
    (["--devices", "0"], "--devices '0': give 2 GPU indices"),
    (["--devices", "0,1,2"], "give 2 GPU indices"),
    (["--devices", "a,b"], "give 2 GPU indices"),
    (["--iterations", "1"], "--iterations must be at least 2"),
    (["--quick", "--iterations", "-5"], "--iterations must be at least 2"),
])
def test_bad_arguments_are_refused_before_any_gpu_work(args, says, capsys):
    assert main(["bench", "comm", *args]) != 0
    assert says in capsys.readouterr().err


def test_argparse_refuses_what_is_not_a_number(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "comm", "--iterations", "many"])
    assert "invalid int value" in capsys.readouterr().err


def test_the_cli_names_the_benchmarks_ops():
    assert COMM_OPS == comm.OPS


def test_quick_and_iterations_shape_the_config():
    from argparse import Namespace

    from arkdma_cli.bench import comm_config

    args = Namespace(ops="put,overlap", devices="1,0", quick=True, no_baselines=True, iterations=None)
    c = comm_config(args)
    assert c.ops == ("put", "overlap") and c.devices == (1, 0) and not c.baselines
    assert c.put_sizes == comm.QUICK["put_sizes"] and c.iterations == 32 and c.tp_tiny
    c = comm_config(Namespace(**{**vars(args), "quick": False, "iterations": 10}))
    assert c.put_sizes == comm.CommConfig().put_sizes and c.iterations == 10


# --- cases and their Worlds ---------------------------------------------------------------------------------------
def test_cases_cover_every_op_and_the_sizes_the_issue_names():
    todo = comm.cases(comm.CommConfig())
    assert {c["op"] for c in todo} == set(comm.OPS)
    puts = [c["bytes"] for c in todo if c["op"] == "put"]
    assert min(puts) == 8 and max(puts) == 64 << 20
    ars = [c["bytes"] for c in todo if c["op"] == "all_reduce"]
    assert min(ars) == 8 << 10 and max(ars) == 256 << 20
    rate = next(c for c in todo if c["op"] == "put_rate")
    assert (rate["count"], rate["bytes"], rate["sms"]) == (64, 8 << 10, 4)
    assert next(c for c in todo if c["op"] == "overlap")["bytes"] == 256 << 20
    tp = next(c for c in todo if c["op"] == "tp_block")
    assert (tp["cfg"]["hidden"], tp["cfg"]["heads"], tp["cfg"]["inner"]) == (1600, 25, 6400)
    assert len({comm.case_key(c) for c in todo}) == len(todo)  # the baselines' items find their case
    for c in todo:  # every size is a message the Worlds can take
        cw.shape_for(c["bytes"], "bf16" if c["op"] in ("all_reduce", "overlap") else "fp32")
    with pytest.raises(ValueError, match="op 'nope' is not one of"):
        comm.cases(comm.CommConfig(ops=("nope",)))


@pytest.mark.parametrize("nbytes, dtype, message", [
    (0, "fp32", "is not a whole number of fp32 elements"), (6, "fp32", "not a whole number"),
    (True, "fp32", "not a whole number"), (3, "bf16", "not a whole number of bf16"),
    (4096 * 4 + 4, "fp32", "give a multiple of 16384 bytes"),
])
def test_sizes_no_message_shape_fits_are_refused(nbytes, dtype, message):
    with pytest.raises(cw.CommWorldError, match=message):
        cw.shape_for(nbytes, dtype)


@pytest.mark.parametrize("make, message", [
    (lambda: cw.ping_pong(10), "10 bytes is not a whole number of fp32 elements"),
    (lambda: cw.all_reduce_pair(3 << 20 | 2), "give a multiple of 8192 bytes"),
    (lambda: cw.put_burst(-1, 8192), "count=-1"),
    (lambda: cw.overlap("all", 64, 1, 8192), "part 'all' is not one of compute, comm, both"),
    (lambda: cw.overlap("both", 0, 1, 8192), "matmul_n=0"),
])
def test_hostile_world_parameters_are_refused(make, message):
    with pytest.raises(cw.CommWorldError, match=message):
        make()


def _named(bench, got):
    return [{m.tensors[t].name: v for t, v in g.items()} for m, g in zip(bench.world.models, got)]


SMALL = [("put 8 B", lambda: cw.ping_pong(8)), ("put 64 KiB", lambda: cw.ping_pong(64 << 10)),
         ("all_reduce 8 KiB", lambda: cw.all_reduce_pair(8 << 10)),
         ("all_reduce 64 KiB", lambda: cw.all_reduce_pair(64 << 10)),
         ("put_rate", lambda: cw.put_burst(64, 8 << 10)),
         ("overlap compute", lambda: cw.overlap("compute", 64, 2, 16 << 10)),
         ("overlap comm", lambda: cw.overlap("comm", 64, 2, 16 << 10)),
         ("overlap both", lambda: cw.overlap("both", 64, 2, 16 << 10))]


@pytest.mark.parametrize("name, make", SMALL, ids=[s[0] for s in SMALL])
def test_each_benchmark_world_evaluates_to_exactly_what_it_must(name, make):
    bench = make()
    got = _named(bench, bench.world.evaluate(bench.inputs, iterations=2))
    assert cw.mismatches(bench, got) == []
    if bench.want[-1]:  # a wrong value is caught, naming the rank and the element
        r = len(bench.want) - 1
        key = next(iter(bench.want[r]))
        got[r][key] = np.array(got[r][key], copy=True)
        got[r][key].reshape(-1)[1] += 1
        assert any(f"rank {r}'s {key}: 1 of" in m and "the first at 1" in m for m in cw.mismatches(bench, got))


def _waits_before(plan, sm: int, first: set[int], on: set[int], delta: int) -> bool:
    """Whether SM `sm`'s stream, before it first runs a tile of one of the ops `first`, waits (with `delta`) on a
    counter of a tile of one of the ops `on`."""
    for ins in plan.streams[sm]:
        if ins["op"] == "run" and plan.tiles[ins["tile"]]["op"] in first:
            return False
        if ins["op"] == "wait" and ins["delta"] == delta:
            c = plan.counters[ins["counter"]]
            members = c["members"] if c["kind"] == "op" else [c["id"]]
            if any(plan.tiles[plan.counters[k]["of"]]["op"] in on for k in members):
                return True
    return False


@pytest.mark.parametrize("nbytes", [8, 64 << 10, 1 << 20])
def test_each_put_waits_for_the_last_put_back_so_iterations_never_overlap(nbytes):
    """The ping-pong's latency is honest only if rank 0's next put waits for rank 1's put-back (which read the buffer
    the put overwrites), across the GPUs: every SM of rank 0 that runs a put waits on the put-back from the last
    iteration (delta 0), and every put-back waits on this iteration's put (delta 1)."""
    from ark_runtime.scheduler import DeviceSpec
    from ark_runtime.world_plan import lower_world

    lw = lower_world(cw.ping_pong(nbytes).world, DeviceSpec(num_sms=8))
    plan, per = lw.plan, lw.plan.world["sms_per_rank"]
    copies = [op.id for op in lw.joined.model.ops if op.kind == "copy"]
    put, back = ([c for c in copies if lw.joined.op_rank[c] == r] for r in (0, 1))
    assert len(put) == len(back) == 1
    for sm, stream in enumerate(plan.streams):
        runs = {plan.tiles[i["tile"]]["op"] for i in stream if i["op"] == "run"}
        if runs & set(put):
            assert sm < per and _waits_before(plan, sm, set(put), set(back), 0), sm
        if runs & set(back):
            assert sm >= per and _waits_before(plan, sm, set(back), set(put), 1), sm
    assert any(mask == 1 for mask in lw.push.values())  # the put-back's counters reach rank 0


def test_each_all_reduce_of_the_pair_waits_on_the_other_gpu():
    """The pair's first all-reduce of the next iteration overwrites what the second read on both GPUs, so each rank's
    first waits (delta 0) on the other rank's second, and each second waits (delta 1) on the other rank's first."""
    from ark_runtime.scheduler import DeviceSpec
    from ark_runtime.world_plan import lower_world

    lw = lower_world(cw.all_reduce_pair(64 << 10).world, DeviceSpec(num_sms=8))
    plan, per, j = lw.plan, lw.plan.world["sms_per_rank"], lw.joined
    stage = {r: [op.id for op in j.model.ops if op.kind == "reduce_peers" and j.op_rank[op.id] == r] for r in (0, 1)}
    assert all(len(v) == 2 for v in stage.values())
    for sm, stream in enumerate(plan.streams):
        r = sm // per
        runs = {plan.tiles[i["tile"]]["op"] for i in stream if i["op"] == "run"}
        if runs & {stage[r][0]}:
            assert _waits_before(plan, sm, {stage[r][0]}, {stage[1 - r][1]}, 0), sm
        if runs & {stage[r][1]}:
            assert _waits_before(plan, sm, {stage[r][1]}, {stage[1 - r][0]}, 1), sm


def _nvrtc():
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # CuPy or libnvrtc missing
        pytest.skip(f"NVRTC is not available: {exc}")


QUICK_WORLDS = [("put", lambda: cw.ping_pong(1 << 20)), ("all_reduce", lambda: cw.all_reduce_pair(16 << 20)),
                ("put_rate", lambda: cw.put_burst(64, 8 << 10)),
                ("overlap", lambda: cw.overlap("both", 512, 2, 1 << 20))]


@pytest.mark.parametrize("name, make", QUICK_WORLDS, ids=[w[0] for w in QUICK_WORLDS])
def test_each_benchmark_world_lowers_on_132_sms_and_each_ranks_kernel_compiles_for_sm90a(name, make):
    from ark_runtime.kernel.codegen import INCLUDE_DIR
    from ark_runtime.plan_check import check
    from ark_runtime.scheduler import DeviceSpec
    from ark_runtime.world_plan import lower_world, world_problems

    lw = lower_world(make().world, DeviceSpec(num_sms=132, wgmma=True))
    assert world_problems(lw.plan, lw.push) == [] and check(lw.plan, interleavings=1) == []
    _nvrtc()
    from driver.gpu import compile

    for rank in lw.ranks:
        assert compile.cubin(rank.source.text, "sm_90a", (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"


def test_the_big_worlds_lower_too():
    """The largest put, all-reduce and overlap of the default run are planned (not compiled: the kernels are those
    of the smaller sizes' templates)."""
    from ark_runtime.scheduler import DeviceSpec
    from ark_runtime.world_plan import lower_world

    for bench in (cw.ping_pong(64 << 20), cw.all_reduce_pair(256 << 20), cw.overlap("both", 4096, 6, 256 << 20)):
        lw = lower_world(bench.world, DeviceSpec(num_sms=132, wgmma=True))
        assert len(lw.ranks) == 2 and lw.plan.tiles


def test_matmul_span_is_first_matmul_start_to_last_matmul_end():
    from ark_runtime.profile import OpTime, Profile

    ops = [OpTime(0, "matmul", "a", 4, 4, 8.0, 2.0, 2.0, 1.0, 5.0), OpTime(1, "reduce_peers", "b", 2, 2, 1.0, 0.5,
                                                                            0.5, 0.0, 20.0),
           OpTime(2, "matmul", "c", 4, 4, 8.0, 2.0, 2.0, 4.0, 7.0)]
    assert matmul_span_us(Profile(21.0, ops, [])) == pytest.approx(10.0)
    assert matmul_span_us(Profile(21.0, ops[1:2], [])) is None and matmul_span_us(None) is None


# --- rows from injected timings ------------------------------------------------------------------------------------
def _times(us: float) -> dict:
    return Times(us, us * 0.9, us * 1.2, 63).as_dict()


def _twin(eager: float, graph: float | None, error: str | None = None) -> dict:
    return {"eager": _times(eager), "graph": _times(graph) if graph else None, "graph_error": error}


def fake_arkdma(case, placement, iterations, budget_s):
    if case["op"] == "put" and case["bytes"] == 512:
        raise RuntimeError("rank 1 (GPU 1): the kernel faulted")
    us = 2.0 + case["bytes"] / 300e3
    if case["op"] == "overlap":
        return {"t_compute_us": 1000.0, "t_comm_us": 800.0, "t_concurrent_us": 1100.0, "times": _times(1100.0),
                "matmul_span_alone_us": 990.0, "matmul_span_concurrent_us": 1039.5, "detail": {}}
    return {"times": _times(us), "per_rank": [_times(us), _times(us)], "detail": {"device": "fake"},
            **({"max_rel_err": 1e-3} if case["op"] == "tp_block" else {})}


def fake_baselines(todo, placement, config, heard):
    for case in todo:
        for rank in range(2):
            head = {"case": [case["op"], case["bytes"]], "rank": rank}
            us = 20.0 + case["bytes"] / 250e3 + rank
            if case["op"] == "overlap":
                heard(rank, {**head, "t_compute_us": 1000.0 + rank, "t_comm_us": 900.0, "t_concurrent_us": 1600.0,
                             "t_matmul_concurrent_us": 1140.0})
            elif case["op"] == "put_rate" and rank == 1:
                heard(rank, {**head, "error": "NCCL WARN something"})
            else:
                item = {**head, "nccl": _twin(us, us / 2), "per_call": 2 if case["op"] == "put" else 1}
                if case["op"] == "all_reduce":
                    item["symm"] = {"two_shot": _twin(us / 3, None, "capture failed"), "one_shot": {"error": "big"}}
                heard(rank, item)
    return GroupResult([[], []])


def _run(tmp_path, placement=TWO, baselines=fake_baselines, config=None):
    saved = []
    config = config or replace(comm.quick(comm.CommConfig()), put_sizes=(8, 512, 1 << 20))
    result = comm.run(config, None, lambda r: saved.append(json.loads(json.dumps(r.as_json()))),
                      placement=placement, arkdma=fake_arkdma, baselines=baselines)
    return result, saved


def test_rows_have_the_keys_the_issue_names_each_saved_as_measured(tmp_path):
    result, saved = _run(tmp_path)
    data = json.loads(json.dumps(result.as_json()))
    assert data["device"] and data["loopback"] is False and data["complete"] is True
    assert {r["op"] for r in data["rows"]} == set(comm.OPS)
    for row in data["rows"]:
        assert {"op", "bytes", "path", "arkdma_us", "nccl_us", "arkdma_gbps", "nccl_gbps", "pct_of_ideal"} <= set(row)
        assert row["path"] == "sm"
    counts = [len(s["rows"]) for s in saved]
    assert counts == sorted(counts) and counts[-1] == len(data["rows"])
    assert all(n in counts for n in range(1, len(data["rows"]) + 1))  # saved after every row
    assert not saved[0]["complete"] and saved[-1]["complete"]
    assert all("out" not in b for b in data["baselines"])


def test_the_arithmetic_of_each_row(tmp_path):
    result, _ = _run(tmp_path)
    by = {(r.op, r.bytes): r for r in result.rows}
    put = by[("put", 8)]
    ark_us = 2.0 + 8 / 300e3
    assert put.arkdma_us == pytest.approx(ark_us) and put.arkdma_gbps == pytest.approx(8 / ark_us / 1e3)
    # NCCL: the slower rank (rank 1), the faster of eager and graph, per one-way (a call is a round trip)
    slow = 20.0 + 8 / 250e3 + 1
    assert put.nccl_us == pytest.approx(slow / 2 / 2) and put.nccl_how == "graph"
    assert put.nccl_eager_us == pytest.approx(slow / 2) and put.speedup == pytest.approx(put.nccl_us / ark_us)
    ar = by[("all_reduce", 1 << 20)]
    assert ar.arkdma_gbps == pytest.approx(2 * (2 - 1) / 2 * (1 << 20) / ar.arkdma_us / 1e3)
    assert ar.symm_algorithm == "two_shot" and ar.symm_us == pytest.approx((20.0 + (1 << 20) / 250e3 + 1) / 3)
    assert ar.detail["symm_one_shot_error"] == "big" and ar.symm_gbps == pytest.approx(
        comm.busbw_gbps(1 << 20, ar.symm_us))
    rate = by[("put_rate", 8 << 10)]
    assert rate.arkdma_gbps == pytest.approx(64 * 8192 / rate.arkdma_us / 1e3)
    assert rate.nccl_us is None and "NCCL WARN" in rate.nccl_error
    ov = by[("overlap", 64 << 20)]
    assert ov.pct_of_ideal == pytest.approx(pct_of_ideal(1000.0, 800.0, 1100.0))
    assert ov.matmul_slowdown_pct == pytest.approx(5.0)
    assert ov.nccl_pct_of_ideal == pytest.approx(pct_of_ideal(1001.0, 900.0, 1600.0))
    assert ov.nccl_matmul_slowdown_pct == pytest.approx((1140.0 / 1001.0 - 1) * 100)
    assert by[("tp_block", next(b for o, b in by if o == "tp_block"))].max_rel_err == 1e-3


def test_a_failing_case_keeps_its_row_with_the_error_and_the_run_goes_on(tmp_path):
    result, _ = _run(tmp_path)
    bad = next(r for r in result.rows if r.op == "put" and r.bytes == 512)
    assert bad.error == "RuntimeError: rank 1 (GPU 1): the kernel faulted" and bad.arkdma_us is None
    assert "the kernel faulted" in bad.detail["trace"] and bad.nccl_us is not None
    assert result.rows[-1].op == "tp_block" and result.rows[-1].error is None


def test_loopback_says_so_and_runs_no_baselines(tmp_path):
    def never(*a):
        raise AssertionError("no NCCL on one GPU")
    result, _ = _run(tmp_path, LOOP, never)
    data = result.as_json()
    assert data["loopback"] is True and data["devices"] == [0, 0]
    assert all("NCCL cannot place two ranks on one GPU" in r["nccl_error"] for r in data["rows"])
    assert any("loopback" in n for n in data["notes"])


def test_a_baseline_group_that_fails_is_said_on_every_row_it_left_out(tmp_path):
    def dies(todo, placement, config, heard):
        fake_baselines(todo[:2], placement, config, heard)
        return GroupResult([[], []], "PyTorch rank 1 failed:\nTraceback ...\nRuntimeError: NCCL error: unhandled")
    result, _ = _run(tmp_path, baselines=dies)
    assert result.rows[0].nccl_us is not None
    assert all("NCCL error: unhandled" in r.nccl_error for r in result.rows[2:])
    assert any("PyTorch + NCCL" in n for n in result.notes)


def test_table_and_plot_from_a_result(tmp_path):
    result, _ = _run(tmp_path)
    console = Console(width=260, record=True)
    console.print(comm_table(result))
    text = console.export_text()
    assert "FAILED: RuntimeError: rank 1 (GPU 1)" in text and "two_shot" in text and "% ideal" in text
    assert "8 B" in text and "64 MiB" in text and "no NCCL" in text
    plot(result, tmp_path / "comm.png")
    assert (tmp_path / "comm.png").stat().st_size > 5000
    loop, _ = _run(tmp_path, LOOP, None)
    plot(loop, tmp_path / "loop.png")  # no baselines at all: still drawn
    assert (tmp_path / "loop.png").stat().st_size > 5000


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(1, 1e4), st.one_of(st.none(), st.floats(1, 1e4))), min_size=2, max_size=2),
       st.sampled_from([1, 2]))
def test_nccl_us_is_the_faster_of_eager_and_graph_of_the_slower_rank(per_rank, per_call):
    case = {"op": "put", "bytes": 4096}
    items = [{"case": ["put", 4096], "rank": r, "nccl": _twin(e, g), "per_call": per_call}
             for r, (e, g) in enumerate(per_rank)]
    row = comm.make_row(case, None, items)
    eager = max(e for e, _ in per_rank) / per_call
    graphs = [g for _, g in per_rank]
    graph = max(graphs) / per_call if all(graphs) else None
    assert row.nccl_us == pytest.approx(min(eager, graph) if graph else eager)
    assert row.nccl_how == ("graph" if graph and graph < eager else "eager")
    assert row.nccl_gbps == pytest.approx(4096 / row.nccl_us / 1e3)
    assert row.arkdma_us is None and row.speedup is None and row.error is None


@given(st.integers(1, 1 << 30), st.floats(0.1, 1e6), st.integers(2, 64))
def test_bus_bandwidth_is_nccl_tests_definition(nbytes, us, ranks):
    assert comm.busbw_gbps(nbytes, us, ranks) == pytest.approx(2 * (ranks - 1) / ranks * nbytes / us / 1e3)
    assert comm.busbw_gbps(nbytes, None) is None and comm.gbps(nbytes, 0) is None
