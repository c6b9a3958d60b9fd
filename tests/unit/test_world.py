"""Programs across GPUs without a GPU: random SPMD programs (local ops, all-reduces of both algorithms, all-gathers,
reduce-scatters, rings of send and recv) joined into a World, evaluated in float64 against an independent NumPy run
of the same program, and lowered: the World's plan keeps every invariant and has no deadlock across ranks in random
interleavings, runs tile by tile to the reference over several iterations, reaches every waiting rank with each
signal, and each rank's kernel compiles for sm_90. Every refusal names the ranks and ops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ark_runtime.kernel.codegen import INCLUDE_DIR
from ark_runtime.kernel.program import INS_SIGNAL
from ark_runtime.lower import LowerError
from ark_runtime.model import Model, ModelError
from ark_runtime.plan_check import check
from ark_runtime.reference import evaluate, run_plan
from ark_runtime.scheduler import DeviceSpec
from ark_runtime.world import World, WorldError, all_reduce_algorithm, joined_inputs
from ark_runtime.world_plan import lower_world, push_masks, world_problems

STEPS = ("neg", "matmul", "all_reduce_one", "all_reduce_two", "gather_scatter", "ring", "pairs")


def program(steps: list[str], world: int, rows: int, cols: int, dtype: str = "fp32") -> list[Model]:
    """Each rank's model of the program: `steps` applied in turn to the tensor the program goes on with."""
    out = []
    for r in range(world):
        m = Model("prog", rank=r, world=world)
        x, w = m.input("x", (rows, cols), dtype), m.input("w", (cols, cols), dtype)
        for i, step in enumerate(steps):
            if step == "neg":
                x = m.unary("neg", x)
            elif step == "matmul":
                x = m.matmul(x, w)
            elif step == "all_reduce_one":
                x = m.all_reduce(x, algorithm="one_shot")
            elif step == "all_reduce_two":
                x = m.all_reduce(x, algorithm="two_shot")
            elif step == "gather_scatter":
                x = m.reduce_scatter(m.all_gather(x))
            elif step == "ring":  # each rank's tensor to the next rank: send first, so nobody waits in a circle
                m.send(x, (r + 1) % world, tag=i)
                x = m.recv((rows, cols), dtype, (r - 1) % world, tag=i)
            elif step == "pairs" and world % 2 == 0:  # even ranks send, then receive; odd ranks the other way round
                peer = r ^ 1
                if r % 2 == 0:
                    m.send(x, peer, tag=i)
                    x = m.add(x, m.recv((rows, cols), dtype, peer, tag=i))
                else:
                    got = m.recv((rows, cols), dtype, peer, tag=i)
                    m.send(x, peer, tag=i)
                    x = m.add(x, got)
        m.output(m.unary("identity", x))
        out.append(m)
    return out


def numpy_run(steps: list[str], inputs: list[dict]) -> list[np.ndarray]:
    """The program's result on every rank, step by step on whole arrays, written apart from the runtime."""
    world = len(inputs)
    xs = [i["x"] for i in inputs]
    for step in steps:
        if step == "neg":
            xs = [-x for x in xs]
        elif step == "matmul":
            xs = [x @ i["w"] for x, i in zip(xs, inputs)]
        elif step.startswith("all_reduce"):
            xs = [sum(xs)] * world
        elif step == "gather_scatter":
            xs = [world * x for x in xs]  # every rank's gathered stack, summed, cut back: rank r's own x n times
        elif step == "ring":
            xs = [xs[(r - 1) % world] for r in range(world)]
        elif step == "pairs" and world % 2 == 0:
            xs = [xs[r] + xs[r ^ 1] for r in range(world)]
    return xs


def _inputs(world: int, rows: int, cols: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((rows, cols)), "w": rng.standard_normal((cols, cols)) / cols}
            for _ in range(world)]


programs = st.tuples(st.lists(st.sampled_from(STEPS), min_size=1, max_size=5), st.integers(2, 4),
                     st.integers(1, 9).map(lambda r: 4 * r), st.sampled_from([4, 8, 24]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs, st.integers(0, 5))
def test_a_world_evaluates_what_numpy_computes_rank_by_rank(prog, seed):
    steps, world, rows, cols = prog
    w = World(program(steps, world, rows, cols))
    inputs = _inputs(world, rows, cols, seed)
    got = w.evaluate(inputs)
    want = numpy_run(steps, inputs)
    for r, m in enumerate(w.models):
        np.testing.assert_allclose(got[r][m.outputs[0]], want[r], rtol=1e-10, atol=1e-10)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs, st.integers(1, 6), st.integers(0, 5))
def test_a_worlds_plan_holds_across_ranks_and_runs_tile_by_tile_to_the_reference(prog, sms, seed):
    steps, world, rows, cols = prog
    w = World(program(steps, world, rows, cols))
    lw = lower_world(w, DeviceSpec(num_sms=sms))
    assert check(lw.plan, interleavings=4) == []  # invariants; no deadlock across ranks in random interleavings
    assert world_problems(lw.plan, lw.push) == []
    inputs = joined_inputs(lw.joined, _inputs(world, rows, cols, seed))
    want = evaluate(lw.joined.model, inputs, iterations=3)
    got = run_plan(lw.plan, lw.joined.model, inputs, seed=seed, iterations=3)
    for o in lw.joined.model.outputs:
        np.testing.assert_allclose(got[o], want[o], rtol=1e-10, atol=1e-10)


def test_each_tile_runs_on_its_ranks_sms_and_every_signal_reaches_the_ranks_that_wait():
    w = World(program(["matmul", "all_reduce_two", "ring", "neg"], 3, 12, 8))
    lw = lower_world(w, DeviceSpec(num_sms=4))
    per = lw.plan.world["sms_per_rank"]
    for s, stream in enumerate(lw.plan.streams):
        for ins in stream:
            if ins["op"] == "run":
                assert lw.plan.world["op_rank"][lw.plan.tiles[ins["tile"]]["op"]] == s // per
    assert lw.push and all(0 < mask < 1 << 3 for mask in lw.push.values())
    for rank in lw.ranks:  # the signal instructions carry the masks
        signals = rank.program.ins[rank.program.ins[:, 0] == INS_SIGNAL]
        for row in signals:
            mask = (int(row[4]) & 0xFFFFFFFF) | (int(row[5]) & 0xFFFFFFFF) << 32
            assert mask == lw.push.get(int(row[1]), 0)
            assert not mask >> rank.rank & 1  # its own copy is added to apart
    forged = dict(lw.push)
    forged.pop(next(iter(forged)))
    assert any("whose signal does not reach it" in p for p in world_problems(lw.plan, forged))
    assert push_masks(lw.plan) == lw.push


def test_a_tile_placed_on_another_ranks_sm_is_caught():
    lw = lower_world(World(program(["neg", "all_reduce_one"], 2, 8, 8)), DeviceSpec(num_sms=2))
    streams = [list(s) for s in lw.plan.streams]
    streams[0], streams[2] = streams[2], streams[0]  # rank 0's SM 0 and rank 1's SM 0 swap their streams
    import dataclasses

    moved = dataclasses.replace(lw.plan, streams=streams)
    assert any("runs on SM 0 of rank" in p for p in world_problems(moved, push_masks(moved)))


def test_all_reduce_picks_its_algorithm_by_world_and_size():
    assert all_reduce_algorithm(1 << 30, 2) == "one_shot"  # two GPUs: one shot moves no more bytes
    assert all_reduce_algorithm(8 << 10, 8) == "one_shot"
    assert all_reduce_algorithm(64 << 20, 4) == "two_shot"
    for rows, cols, world, kinds in [(64, 4096, 4, ["reduce_peers", "gather_peers"]),
                                     (1, 4096 * 64, 4, ["reduce_peers", "gather_peers"]),  # a row: shares by column
                                     (1, 3, 4, ["reduce_peers"])]:  # fewer elements than ranks: one shot
        models = []
        for r in range(world):
            m = Model("ar", rank=r, world=world)
            m.output(m.all_reduce(m.input("x", (rows, cols))))
            models.append(m)
        j = World(models).joined()
        assert [op.kind for op in j.model.ops if j.op_rank[op.id] == 0] == kinds
        inputs = [{"x": np.full((rows, cols), float(r + 1))} for r in range(world)]
        got = World(models).evaluate(inputs)
        assert all(np.all(got[r][models[r].outputs[0]] == world * (world + 1) / 2) for r in range(world))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_each_ranks_kernel_compiles(dtype, arch):
    from driver.gpu import compile

    w = World(program(["matmul", "all_reduce_one", "all_reduce_two", "gather_scatter", "ring", "pairs"], 2, 64,
                      128, dtype))
    lw = lower_world(w, DeviceSpec(num_sms=132))
    for rank in lw.ranks:
        text = rank.source.text
        assert "#define ARK_WORLD 2" in text and "ark::reduce_peers_tile<" in text
        assert compile.cubin(text, arch, (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"


def _pair(build0, build1) -> list[Model]:
    out = []
    for r, build in enumerate((build0, build1)):
        m = Model("bad", rank=r, world=2)
        x = m.input("x", (4, 8))
        build(m, x)
        out.append(m)
    return out


def _out(m, t):
    m.output(m.unary("identity", t))


@pytest.mark.parametrize("b0, b1, message", [
    (lambda m, x: _out(m, m.add(x, m.recv((4, 8), "fp32", 1))), lambda m, x: (m.send(x, 0), _out(m, x))
     if False else _out(m, m.add(x, m.recv((4, 8), "fp32", 0))),
     r"rank 0 sends 0 message\(s\) to rank 1 with tag 0, and rank 1 receives 1"),
    (lambda m, x: (_out(m, m.recv((4, 8), "fp32", 1)), m.send(x, 1)),
     lambda m, x: (_out(m, m.recv((4, 8), "fp32", 0)), m.send(x, 0)),
     r"wait on each other and none can go on .*rank 0 at op 0 \(recv from rank 1, tag 0.*rank 1 at op 0 \(recv from "
     r"rank 0"),
    (lambda m, x: (m.send(x, 1), _out(m, x)), lambda m, x: _out(m, m.recv((8, 4), "fp32", 0)),
     r"rank 0's send \(op 0\) of x \(4, 8\) fp32 to rank 1, tag 0, is received by rank 1's recv \(op 0\) as \(8, 4\)"),
    (lambda m, x: _out(m, m.all_reduce(x)), lambda m, x: _out(m, m.all_gather(x)),
     r"collective 0: rank 0 calls all_reduce of \(4, 8\) fp32 \(auto\), rank 1 all_gather"),
    (lambda m, x: _out(m, m.all_reduce(x)), lambda m, x: _out(m, x),
     r"the ranks call \[1, 0\] collectives"),
    (lambda m, x: _out(m, m.all_reduce(x, algorithm="one_shot")), lambda m, x: _out(m, m.all_reduce(x)),
     r"rank 0 calls all_reduce of \(4, 8\) fp32 \(one_shot\), rank 1 all_reduce of \(4, 8\) fp32 \(auto\)"),
    (lambda m, x: _out(m, m.unary("neg", m.send(x, 1))), lambda m, x: _out(m, m.recv((4, 8), "fp32", 0)),
     r"rank 0's op 1 \(unary\) reads send0, the message its send \(op 0\) puts in rank 1's memory"),
    (lambda m, x: (m.send(x, 1), _out(m, m.all_reduce(x))),
     lambda m, x: (_out(m, m.all_reduce(x)), _out(m, m.recv((4, 8), "fp32", 0))), None),  # fine: send goes first
])
def test_worlds_that_do_not_fit_are_refused_naming_ranks_and_ops(b0, b1, message):
    models = _pair(b0, b1)
    if message is None:
        World(models).joined()
        return
    with pytest.raises(WorldError, match=message):
        World(models).joined()
    with pytest.raises(LowerError, match=message):
        lower_world(World(models), DeviceSpec(num_sms=2))


@pytest.mark.parametrize("make, message", [
    (lambda: Model("m").send(Model("m").input("x", (2,)), 1), "not a tensor of model"),
    (lambda: _one(lambda m, x: m.send(x, 1)), "is of one GPU; a model that communicates is one rank of a world"),
    (lambda: _rank(lambda m, x: m.send(x, 0)), r"peer=0 must be another rank of the world's 2 \(0..1, not this"),
    (lambda: _rank(lambda m, x: m.send(x, 2)), r"peer=2 must be another rank"),
    (lambda: _rank(lambda m, x: m.send(x, -1)), r"peer=-1 must be the rank of another GPU"),
    (lambda: _rank(lambda m, x: m.send(x, True)), r"peer=True"),
    (lambda: _rank(lambda m, x: m.send(x, 1, tag=-3)), r"tag=-3 must be an int in 0\.\.2147483647"),
    (lambda: _rank(lambda m, x: m.send(m.copy(x, "host"), 1)), "is in host memory"),
    (lambda: _rank(lambda m, x: m.recv((0, 3), "fp32", 1)), r"recv: shape=\(0, 3\) must be one or more positive"),
    (lambda: _rank(lambda m, x: m.recv((2, 3), "fp64", 1)), r"recv: dtype='fp64' is not one of"),
    (lambda: _rank(lambda m, x: m.all_reduce(x, algorithm="ring")), r"algorithm='ring' is not one of auto"),
    (lambda: _rank(lambda m, x: m.all_reduce(m.input("i", (4,), "int32"))), "i is int32"),
    (lambda: _rank(lambda m, x: m.reduce_scatter(m.input("y", (3, 8)))), r"first axis must divide into the world's 2"),
    (lambda: _rank(lambda m, x: m.op("send", x, peer=1, rank=0, world=2)), "rank and world are the model's"),
    (lambda: Model("m", rank=2, world=2), r"rank=2 must be an int in 0\.\.1"),
    (lambda: Model("m", rank=0, world=0), r"world=0 must be an int in 1\.\.64"),
    (lambda: Model("m", rank=0, world=65), r"world=65"),
    (lambda: Model("m", rank="0", world=2), r"rank='0'"),
])
def test_hostile_communication_calls_are_refused_saying_what_fits(make, message):
    with pytest.raises(ModelError, match=message):
        make()


def _one(build):
    m = Model("one")
    return build(m, m.input("x", (4, 8)))


def _rank(build):
    m = Model("r", rank=0, world=2)
    return build(m, m.input("x", (4, 8)))


@pytest.mark.parametrize("make, message", [
    (lambda: World([Model("a", rank=0, world=2)]), "two or more Models"),
    (lambda: World("ab"), "two or more Models"),
    (lambda: World([_done(0, 2), _done(0, 2)]), r"at place 1 says rank=0, world=2"),
    (lambda: World([_done(0, 3), _done(1, 3)]), r"at place 0 says rank=0, world=3"),
])
def test_hostile_worlds_are_refused(make, message):
    with pytest.raises(WorldError, match=message):
        make()


def _done(rank: int, world: int) -> Model:
    m = Model("d", rank=rank, world=world)
    m.output(m.unary("neg", m.input("x", (2, 2))))
    return m


def test_a_rank_model_that_communicates_is_not_evaluated_or_lowered_alone():
    from ark_runtime.lower import lower

    m = _pair(lambda m, x: _out(m, m.all_reduce(x)), lambda m, x: _out(m, m.all_reduce(x)))[0]
    with pytest.raises(ModelError, match=r"op 0 \(all_reduce\) communicates with other ranks: evaluate and lower the "
                                         "World"):
        evaluate(m, {"x": np.zeros((4, 8))})
    with pytest.raises((LowerError, ModelError), match="communicates with other ranks"):
        lower(m, DeviceSpec(num_sms=2))
    with pytest.raises(LowerError, match="lower_world takes a World, not Model"):
        lower_world(m)


def test_inputs_of_the_wrong_count_are_refused():
    w = World(program(["neg"], 2, 4, 4))
    with pytest.raises(WorldError, match="inputs must be a list of 2 dicts, one per rank"):
        w.evaluate({"x": 1})
    with pytest.raises(ValueError, match=r"input 'r1.x' \(4, 4\) is missing"):
        w.evaluate([_inputs(2, 4, 4, 0)[0], {}])


@pytest.mark.parametrize("kw, message", [
    ({"world": "w"}, "WorldRuntime takes a World, not str"),
    ({"budget_s": 0}, r"budget_s must be a number of seconds in \(0, 3600\]"),
    ({"placement": "random"}, "placement 'random' is not one of"),
    ({"bind": [{}]}, "bind must be a list of 2 dicts"),
    ({"bind": [{}, {"nope": 1}]}, "bind\\[1\\] names nope, which rank 1's model has no tensor called"),
])
def test_world_runtime_refuses_bad_arguments_before_it_looks_for_a_gpu(kw, message):
    from ark_runtime.runtime import LoopError
    from ark_runtime.runtime.world_runtime import WorldRuntime

    args = {"world": World(program(["neg"], 2, 4, 4)), **kw}
    with pytest.raises(LoopError, match=message):
        WorldRuntime(args.pop("world"), **args)


def test_the_shared_arena_holds_what_peers_touch_and_every_rank_lays_it_out_alike():
    from ark_runtime.runtime.world_process import ARENA_ALIGN, arena_layout, shared_tensors

    w = World(program(["matmul", "ring", "all_reduce_two", "gather_scatter"], 3, 12, 8))
    lw = lower_world(w, DeviceSpec(num_sms=4))
    j = lw.joined
    shared = shared_tensors(j)
    touched_by_others = {j.model.tensors[t].root for op in j.model.ops for t in (*op.inputs, op.output)
                         if j.tensor_rank[j.model.tensors[t].root] != j.op_rank[op.id]}
    assert shared == touched_by_others and shared  # the recv buffers, the all-reduce's inputs and shares
    assert not any(j.model.tensors[t].name.endswith(".w") for t in shared)  # weights stay each rank's own
    n = lw.ranks[0].program.num_counters
    for r in range(3):
        layout = arena_layout(j, r, n)
        assert set(layout.offsets) == {t for t in shared if j.tensor_rank[t] == r}
        spans = sorted((off, off + j.model.tensors[t].nbytes) for t, off in layout.offsets.items())
        assert all(off % ARENA_ALIGN == 0 for off, _ in spans)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # no overlap
        assert layout.counters_at >= (spans[-1][1] if spans else 0) and layout.nbytes == layout.counters_at + 8 * n
        assert layout == arena_layout(lower_world(w, DeviceSpec(num_sms=4)).joined, r, n)  # every process alike


@pytest.mark.parametrize("kw, message", [
    ({"world": "w"}, "WorldProcess takes a World, not str"),
    ({"rank": 2}, r"rank=2: give this process's rank of the World, 0\.\.1"),
    ({"rank": True}, r"rank=True"),
    ({"placement": "x"}, "placement 'x' is not one of"),
    ({"budget_s": -1}, r"budget_s must be a number of seconds"),
    ({"close_timeout_s": 0}, r"close_timeout_s must be a number of seconds"),
    ({"bind": {"nope": 1}}, "bind names nope, which rank 0's model has no tensor called"),
])
def test_world_process_refuses_bad_arguments_before_it_looks_for_a_gpu(kw, message):
    from ark_runtime.runtime import LoopError
    from ark_runtime.runtime.world_process import WorldProcess

    args = {"world": World(program(["neg"], 2, 4, 4)), "rank": 0, **kw}
    with pytest.raises(LoopError, match=message):
        WorldProcess(args.pop("world"), args.pop("rank"), **args)
