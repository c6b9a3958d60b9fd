"""The communication examples (pipeline, data_parallel, tensor_parallel) without a GPU: their arguments and
refusals, where the ranks are placed, each World built, joined, lowered over 132 SMs a rank and each rank's kernel
compiled for sm_90a, each World evaluated to what float64 PyTorch computes, each PyTorch twin run in two processes
under gloo (and both ranks in one, as the loopback runs it) to the same, and the comparison's printout and verdict
with the GPU's parts stood in for. They run on GPUs in tests/gpu/test_comm_examples.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from examples import data_parallel, pipeline, tensor_parallel, two_gpus

EXAMPLES = [pipeline, data_parallel, tensor_parallel]
IDS = ["pipeline", "data_parallel", "tensor_parallel"]


# --- arguments ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("example", EXAMPLES, ids=IDS)
@pytest.mark.parametrize("args, says", [
    (["--devices", "0"], "give 2 GPU indices, one per rank"),
    (["--devices", "0,-1"], "give 2 GPU indices"),
    (["--devices", "gpu0,gpu1"], "give 2 GPU indices"),
    (["--iterations", "1"], "--iterations must be at least 2"),
    (["--iterations", "x"], "invalid int value"),
])
def test_every_example_refuses_bad_shared_arguments(example, args, says, capsys):
    with pytest.raises(SystemExit):
        example.parse(args)
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("parse, args, says", [
    (pipeline.parse, ["--micro", "0"], "--micro must be at least 1, not 0"),
    (pipeline.parse, ["--rows", "-3"], "--rows must be at least 1"),
    (data_parallel.parse, ["--buckets", "0"], "--buckets must be at least 1"),
    (data_parallel.parse, ["--tokens", "0"], "--tokens must be at least 1"),
    (tensor_parallel.parse, ["--hidden", "100", "--heads", "3"], "hidden 100 is not a multiple of heads 3"),
    (tensor_parallel.parse, ["--heads", "1", "--hidden", "64"], "heads 1: each of the 2 ranks needs one head"),
    (tensor_parallel.parse, ["--seq", "0"], "seq must be at least 1, not 0"),
    (tensor_parallel.parse, ["--inner", "1"], "inner 1: each of the 2 ranks needs one MLP column"),
])
def test_each_example_refuses_its_own_bad_arguments(parse, args, says, capsys):
    with pytest.raises(SystemExit):
        parse(args)
    assert says in capsys.readouterr().err


def test_arguments_shape_the_config():
    _, devices, cfg = pipeline.parse(["--tiny", "--micro", "3", "--devices", "1,0"])
    assert devices == (1, 0) and cfg == replace(pipeline.TINY, micro=3)
    _, _, cfg = tensor_parallel.parse(["--heads", "20"])
    assert cfg.heads_of(0) == (0, 10) and cfg.heads_of(1) == (10, 20) and cfg.head_dim == 80
    _, _, cfg = tensor_parallel.parse([])
    assert (cfg.batch, cfg.seq, cfg.hidden, cfg.heads, cfg.inner) == (4, 384, 1600, 25, 6400)
    assert cfg.heads_of(0) == (0, 13) and cfg.heads_of(1) == (13, 25) and cfg.head_dim == 64


def test_main_says_when_there_is_no_gpu(capsys, monkeypatch):
    monkeypatch.setattr(two_gpus, "gpu_facts", lambda: (0, 0))
    assert tensor_parallel.main(["--tiny"]) == 1
    assert "no CUDA GPU is visible" in capsys.readouterr().err


# --- placement -----------------------------------------------------------------------------------------------------
@given(st.tuples(st.integers(0, 9), st.integers(0, 9)), st.integers(1, 8), st.sampled_from([78, 132, 144]))
def test_ranks_go_where_asked_else_loopback_on_a_one_gpu_machine_else_refused(asked, gpus, sms):
    try:
        p = two_gpus.place(asked, gpus, sms)
    except two_gpus.TwoGpuError as exc:
        assert gpus >= 2 and max(asked) >= gpus and f"GPU {max(asked) if asked[0] < gpus else asked[0]}" in str(exc)
        return
    if max(asked) < gpus:
        assert p.devices == asked and p.loopback == (asked[0] == asked[1])
    else:
        assert gpus == 1 and p.devices == (0, 0) and p.loopback and "this machine has one GPU" in p.note
    assert (p.sms == sms // 2) if p.loopback else p.sms is None
    if p.loopback:
        assert "NCCL cannot place two ranks on one GPU" in p.note


def test_no_gpu_or_hostile_devices_are_refused():
    with pytest.raises(two_gpus.TwoGpuError, match="no CUDA GPU is visible"):
        two_gpus.place((0, 1), 0, 0)
    for bad in [(0,), (0, 1, 2), (0, True), (-1, 0), ("0", 1)]:
        with pytest.raises(two_gpus.TwoGpuError, match="give 2 GPU indices"):
            two_gpus.place(bad, 2, 132)


# --- the Worlds -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("example", EXAMPLES, ids=IDS)
def test_each_world_evaluates_to_what_float64_pytorch_computes(example):
    p = example.program(example.TINY, 3, 4)
    rounded = [two_gpus.rounded(p.world.models[r], v) for r, v in enumerate(p.inputs)]
    for iterations, wants in ((1, p.want), (3, example.reference(example.TINY, rounded, iterations=3))):
        got = p.world.evaluate(rounded, iterations=iterations)  # what carries over (weights, the block's x) too
        for r, m in enumerate(p.world.models):
            assert len(m.outputs) == len(wants[r])
            for o, want in zip(m.outputs, wants[r]):
                assert two_gpus.rel_err(got[r][o], want) < 1e-9, (iterations, r)
    other = example.program(example.TINY, 4, 4)  # a check that can fail: other inputs give other outputs
    assert two_gpus.rel_err(p.want[-1][0], other.want[-1][0]) > 1e-3


def _nvrtc():
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # CuPy or libnvrtc missing
        pytest.skip(f"NVRTC is not available: {exc}")


@pytest.mark.parametrize("example", EXAMPLES, ids=IDS)
@pytest.mark.parametrize("size", ["tiny", "default"])
def test_each_world_lowers_on_132_sms_and_each_ranks_kernel_compiles_for_sm90a(example, size):
    from ark_runtime.kernel.codegen import INCLUDE_DIR
    from ark_runtime.plan_check import check
    from ark_runtime.scheduler import DeviceSpec
    from ark_runtime.world_plan import lower_world, world_problems

    cfg = example.TINY if size == "tiny" else example.Config()
    lw = lower_world(example.world(cfg), DeviceSpec(num_sms=132, wgmma=True))
    assert world_problems(lw.plan, lw.push) == []
    if size == "tiny":
        assert check(lw.plan, interleavings=2) == []
    names = {t.name for t in lw.joined.model.tensors}
    for r, m in enumerate(lw.world.models):  # what the examples set and get, by the names WorldRuntime takes
        assert {f"r{r}.{m.tensors[o].name}" for o in m.outputs} <= names
        assert {f"r{r}.{t.name}" for t in m.tensors if t.producer is None} <= names
    assert any(lw.push.values())  # a rank waits on the other: communication crosses GPUs
    _nvrtc()
    from driver.gpu import compile

    for rank in lw.ranks:
        assert "#define ARK_WORLD 2" in rank.source.text
        assert compile.cubin(rank.source.text, "sm_90a", (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"


def test_the_tp_worlds_ranks_differ_in_shape_where_the_heads_split_unevenly():
    w = tensor_parallel.world(tensor_parallel.TINY)  # 3 heads: 2 and 1
    shapes = [{t.name: t.shape for t in m.tensors if t.producer is None} for m in w.models]
    assert shapes[0]["wq"] == (192, 128) and shapes[1]["wq"] == (192, 64)
    assert shapes[0]["wo"] == (128, 192) and shapes[1]["w1"] == (192, 384)
    kinds = [[op.kind for op in m.ops] for m in w.models]
    assert all(k.count("all_reduce") == 2 for k in kinds)


# --- the PyTorch twins on the CPU ------------------------------------------------------------------------------------
def _check_items(p, items):
    got = {int(r): outs for i in items for r, outs in i["outs"].items()}
    assert sorted(got) == [0, 1]
    for r, outs in got.items():
        assert len(outs) == len(p.want[r])
        for g, w in zip(outs, p.want[r]):
            assert two_gpus.rel_err(g, w) < 1e-5


@pytest.mark.parametrize("example", EXAMPLES, ids=IDS)
def test_each_twin_in_two_processes_under_gloo_computes_the_reference(example):
    pytest.importorskip("torch")
    p = example.program(replace(example.TINY, dtype="fp32"), 1, 0)
    group = two_gpus.run_group(two_gpus.Job(p.module, "torch_rank", p.args), [None, None], "gloo", 120)
    assert group.error is None, group.error
    assert all(i["times"] is None for per in group.items for i in per)  # iterations 0: checked, not timed
    _check_items(p, [i for per in group.items for i in per])


@pytest.mark.parametrize("example", EXAMPLES, ids=IDS)
def test_each_loopback_twin_computes_the_reference(example):
    torch = pytest.importorskip("torch")
    p = example.program(replace(example.TINY, dtype="fp32"), 2, 0)
    _check_items(p, list(example.torch_loopback(0, 1, torch.device("cpu"), p.args)))


def test_a_failing_twin_is_reported_naming_the_rank_and_the_others_are_ended():
    pytest.importorskip("torch")
    group = two_gpus.run_group(two_gpus.Job("examples.pipeline", "torch_rank", {"cfg": {"micro": "x"}}),
                               [None, None], "gloo", 60)
    assert group.error and "PyTorch rank" in group.error and "failed" in group.error


def test_a_twin_that_does_not_finish_in_time_is_ended():
    pytest.importorskip("torch")
    # 10 s: a spawned child imports PyTorch before it yields, seconds on a loaded two-core machine
    group = two_gpus.run_group(two_gpus.Job("tests.unit.test_comm_examples", "_sleeps", {}), [None], "gloo", 10)
    assert group.error and "did not finish within 10 s" in group.error
    assert group.items == [[{"started": True}]]


def _sleeps(rank, world, device, args):
    import time

    yield {"started": True}
    time.sleep(60)


# --- times and the comparison ---------------------------------------------------------------------------------------
def test_times_are_the_median_and_spread_of_the_gaps():
    t = two_gpus.Times.of([1.0, 2.0, 3.0, 4.0, 100.0])
    assert t.median_us == 3.0 and t.p10_us == pytest.approx(1.4) and t.p90_us == pytest.approx(61.6)
    assert t.samples == 5 and t.scaled(0.5).median_us == 1.5
    with pytest.raises(ValueError, match="at least two iterations"):
        two_gpus.Times.of([])


class _Rank:
    def __init__(self, ends):
        self.ends = np.array(ends, np.int64)

    def iteration_ns(self):
        return self.ends


class _World:
    def __init__(self, *ranks):
        self.ranks = list(ranks)


def test_world_gaps_take_each_ranks_last_iterations_and_the_slower_rank_paces():
    slow = _Rank([0, 10_000, 40_000, 70_000, 100_000])  # the first gap is an earlier run's: left out below
    fast = _Rank([0, 1_000, 21_000, 41_000, 61_000])
    per = two_gpus.world_gaps(_World(slow, fast), 4)
    assert [t.median_us for t in per] == [30.0, 20.0] and [t.samples for t in per] == [3, 3]
    assert two_gpus.slowest(per).median_us == 30.0


def _program():
    return pipeline.program(pipeline.TINY, 0, 4)


def _fake(monkeypatch, twin_error=None, twin_scale=1.0, world_scale=1.0):
    p = _program()

    def group(job, devices, backend, timeout_s, on_item=None):
        assert job.function == ("torch_loopback" if len(devices) == 1 else "torch_rank")
        if twin_error:
            return two_gpus.GroupResult([[] for _ in devices], twin_error)
        t = {"eager": two_gpus.Times(50.0, 45.0, 60.0, 63).as_dict(), "graph": None, "graph_error": "no capture"}
        items = [[{"outs": {r: [w * twin_scale for w in p.want[r]]}, "times": t}] for r in range(2)]
        return two_gpus.GroupResult(items)

    def world(w, placement, inputs, iterations, check, budget_s=10.0, sms=None, profile=False):
        outs = [{m.tensors[o].name: want * world_scale for o, want in zip(m.outputs, p.want[r])}
                for r, m in enumerate(w.models)]
        ok = check(outs)
        t = two_gpus.Times(20.0, 19.0, 25.0, 63) if ok else None
        return two_gpus.WorldRun(outs, t, [t, t] if t else [], "NVIDIA H200")
    monkeypatch.setattr(two_gpus, "run_group", group)
    monkeypatch.setattr(two_gpus, "run_world", world)
    return p


def test_the_comparison_prints_both_sides_and_passes_when_both_are_right(monkeypatch):
    p = _fake(monkeypatch)
    lines = []
    assert two_gpus.compare(p, two_gpus.place((0, 1), 2, 132), 64, say=lines.append) == 0
    text = "\n".join(lines)
    assert "PyTorch + NCCL: eager 50.0 us (p10 45.0, p90 60.0), CUDA graph - (no capture)" in text
    assert "arkdma World: 20.0 us (p10 19.0, p90 25.0) per iteration" in text
    assert "arkdma / best PyTorch: 0.40x the time (2.50x speed)" in text


@pytest.mark.parametrize("kw, says", [({"world_scale": 1.5}, "WRONG: not timed"),
                                      ({"twin_scale": 1.5}, "WRONG, allowed"),
                                      ({"twin_error": "PyTorch rank 1 failed: boom"}, "failed: PyTorch rank 1")])
def test_the_comparison_fails_when_either_side_is_wrong_or_fails(monkeypatch, kw, says):
    p = _fake(monkeypatch, **kw)
    lines = []
    assert two_gpus.compare(p, two_gpus.place((0, 1), 2, 132), 64, say=lines.append) == 1
    assert says in "\n".join(lines)


def test_the_loopback_comparison_says_what_it_compares(monkeypatch):
    p = _fake(monkeypatch)
    lines = []
    assert two_gpus.compare(p, two_gpus.place((0, 1), 1, 132), 64, say=lines.append) == 0
    text = "\n".join(lines)
    assert "this machine has one GPU" in text and "PyTorch (both ranks in one process, no NCCL)" in text
