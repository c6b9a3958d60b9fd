"""A World on GPUs: programs of every communication op (tests/unit/test_world.py's) run by WorldRuntime, rank by rank
against the float64 reference over several iterations, in fp32 and bf16; an all-reduce gives every rank the same
bits; a peer that never runs makes the waiting rank fault within the budget, naming the peer's op. On two GPUs where
the machine has them (peer access), else two ranks sharing one GPU (a loopback World, each rank half the SMs)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.gpu.test_loop_runtime import TOL, _rounded
from tests.unit.test_world import _inputs, numpy_run, program

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def placement(gpu):
    """(devices, sms per rank) for a World of two ranks."""
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    if count >= 2 and cupy.cuda.runtime.deviceCanAccessPeer(0, 1):
        return [0, 1], None
    sms = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"] // 2
    return [0, 0], sms


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("steps", [["matmul", "all_reduce_one"], ["neg", "all_reduce_two", "ring"],
                                   ["gather_scatter", "pairs", "matmul"]])
def test_a_world_runs_to_the_reference_on_every_rank(placement, dtype, steps):
    from ark_runtime.runtime.world_runtime import WorldRuntime
    from ark_runtime.world import World

    devices, sms = placement
    rows, cols = 64, 256
    w = World(program(steps, 2, rows, cols, dtype))
    inputs = [_rounded(w.models[r], i) for r, i in enumerate(_inputs(2, rows, cols, 1))]
    with WorldRuntime(w, devices, sms=sms) as wr:
        for r in range(2):
            for name, value in inputs[r].items():
                wr.set(r, name, value)
        for n in (1, 4):
            wr.run(n)
            wr.wait()
            want = numpy_run(steps, inputs)  # no state: every iteration computes the same
            for r, m in enumerate(w.models):
                got = wr.get(r, m.tensors[m.outputs[0]].name).astype(np.float64)
                scale = max(1.0, float(np.abs(want[r]).max()))
                assert np.abs(got - want[r]).max() / scale <= TOL[dtype] * 2, (r, n)


def test_an_all_reduce_gives_every_rank_the_same_bits(placement):
    from ark_runtime.model import Model
    from ark_runtime.runtime.world_runtime import WorldRuntime
    from ark_runtime.world import World

    devices, sms = placement
    models = []
    for r in range(2):
        m = Model("ar", rank=r, world=2)
        m.output(m.all_reduce(m.input("x", (512, 1024), "bf16")))
        models.append(m)
    rng = np.random.default_rng(0)
    with WorldRuntime(World(models), devices, sms=sms) as wr:
        for r in range(2):
            wr.set(r, "x", rng.standard_normal((512, 1024)))
        wr.run(3)
        wr.wait()
        a, b = (wr.get(r, models[r].tensors[models[r].outputs[0]].name) for r in range(2))
    assert np.array_equal(a, b)


def test_a_peer_that_never_runs_faults_the_waiting_rank_naming_it(placement):
    from ark_runtime.runtime import LoopFault
    from ark_runtime.runtime.world_runtime import WorldRuntime, _on
    from ark_runtime.world import World

    devices, sms = placement
    w = World(program(["ring"], 2, 16, 64))
    with WorldRuntime(w, devices, sms=sms, budget_s=1.0) as wr:
        with _on(devices[0]):
            wr.ranks[0].run(1)  # rank 1 is never asked to run: its send never comes
            with pytest.raises(LoopFault, match=r"timed out|waited .* for tile .* on rank 1"):
                wr.ranks[0].wait(timeout=20)


def test_report_names_every_transfer_between_ranks(placement):
    from ark_runtime.runtime.world_runtime import WorldRuntime
    from ark_runtime.world import World

    devices, sms = placement
    w = World(program(["all_reduce_one", "ring"], 2, 64, 256))
    with WorldRuntime(w, devices, sms=sms) as wr:
        wr.run(2)
        wr.wait()
        rows = wr.report()
    kinds = sorted((row.rank, row.kind) for row in rows)
    assert kinds == [(0, "copy"), (0, "reduce_peers"), (1, "copy"), (1, "reduce_peers")]
    assert all(row.path == "sm" and row.peers == (1 - row.rank,) and row.bytes == 64 * 256 * 4 and row.time_us > 0
               for row in rows)
