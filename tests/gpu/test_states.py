"""States on a GPU: a cache appended a row an iteration at a position the kernel counts on, read before and after
the append, in each dtype: the outputs and the state after n iterations against the float64 reference over n."""

from __future__ import annotations

import numpy as np
import pytest

from ark_runtime.reference import evaluate
from tests.gpu.test_loop_runtime import TOL, _rounded
from tests.unit.test_states import _inputs, decode_like

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("read_first", [False, True])
def test_a_cache_appended_at_a_counted_position(gpu, dtype, read_first):
    from ark_runtime.runtime import Runtime

    m = decode_like(capacity=64, d=128, dtype=dtype, read_first=read_first)
    inputs = _inputs(m, 3)
    with Runtime(m) as rt:
        for name, value in inputs.items():
            rt.set(name, value)
        for n in (1, 5, 20):
            rt.run(n - (rt.iterations_done or 0))
            rt.wait()
            want = evaluate(m, _rounded(m, inputs), iterations=n)
            for t in (m.tensors[i] for i in m.outputs):
                got = rt.get(t.name).astype(np.float64)
                scale = max(1.0, float(np.abs(want[t.id]).max()))
                assert np.abs(got - want[t.id]).max() / scale <= TOL[dtype], (t.name, n)
            assert int(rt.get("pos")[0]) == n
            cache = rt.get("cache").astype(np.float64)
            assert np.abs(cache - want[next(t.id for t in m.tensors if t.name == "cache")]).max() <= TOL[dtype] * 4


def test_a_write_past_the_state_faults_naming_it(gpu):
    from ark_runtime.runtime import LoopFault, Runtime

    m = decode_like(capacity=4, d=16)
    with Runtime(m) as rt:
        rt.set("pos", np.array([3], np.int32))
        rt.run(2)  # rows 3, then 4: past the 4 rows
        with pytest.raises(LoopFault, match="the write's row 4 puts its rows outside the state"):
            rt.wait()


def test_a_sequence_at_its_blocks_end_faults_and_the_others_blocks_are_untouched(gpu):
    """A batch where one sequence reaches its block's end (the cache's capacity) while the others go on: the kernel
    faults naming it, and nothing lands outside that sequence's block (docs/runtime.md, the edges of a batch)."""
    from ark_runtime.runtime import LoopFault, Runtime
    from tests.unit.test_states import batched_decode_step

    m = batched_decode_step(batch=3, capacity=6, heads=4, kv_heads=2, d=8)
    with Runtime(m) as rt:
        for name, value in {**_inputs(m, 3), "pos": np.array([1, 5, 0], np.int32)}.items():
            rt.set(name, value)
        rt.set("cache_k", np.zeros((3, 6, 16), np.float32))
        rt.run(1)  # rows 1, 5, 0: every one inside its block
        rt.wait()
        before = rt.get("cache_k").copy()
        rt.run(1)  # rows 2, 6, 1: the second sequence's 6 is past its block of 6
        with pytest.raises(LoopFault, match="a sequence's row 6 is outside its block of 6 rows"):
            rt.wait()
        after = rt.get("cache_k")  # the kernel has stopped; its memory is still the runtime's
    assert before[0, 1].any() and before[1, 5].any() and before[2, 0].any()
    assert not before[0, 2:].any() and not before[2, 1:].any()
    np.testing.assert_array_equal(after, before)  # the faulting write checked every row first and wrote none


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_decode_steps_over_a_growing_cache(gpu, dtype):
    """Grouped-query attention of one token a step over a key/value cache the kernel appends to at the position it
    counts: the output at every step against the reference over as many steps; no new plan or compile as it grows."""
    from ark_runtime.runtime import Runtime
    from tests.unit.test_states import decode_step

    m = decode_step(capacity=64, heads=8, kv_heads=2, d=64, dtype=dtype)
    inputs = _inputs(m, 5)
    out = m.tensors[m.outputs[0]]
    with Runtime(m) as rt:
        for name, value in inputs.items():
            rt.set(name, value)
        for step in range(1, 41):
            rt.run(1)
            rt.wait()
            if step in (1, 2, 7, 40):
                want = evaluate(m, _rounded(m, inputs), iterations=step)[out.id]
                got = rt.get(out.name).astype(np.float64)
                assert np.abs(got - want).max() / max(1.0, float(np.abs(want).max())) <= TOL[dtype], step


def test_stream_yields_each_row_of_a_host_ring_as_the_kernel_counts_it(gpu):
    from ark_runtime.runtime import Runtime
    from tests.unit.test_states import counting_ring

    m = counting_ring(64)
    with Runtime(m) as rt:
        rt.run(40)  # no wait(): the rows come as they are made
        got = [int(row[0]) for row in rt.stream("ring", "hpos")]
        assert got == list(range(1, 41))
        rt.run(3)
        assert [int(row[0]) for row in rt.stream("ring", "hpos")] == [41, 42, 43]


def test_host_states_start_at_zero_on_pinned_memory_used_before(gpu):
    """CuPy's pinned pool hands freed blocks back as they were: host states (a ring, its count) start at zero anyway,
    as device states do, or a count would start wherever the last owner left it."""
    import ctypes

    import cupy

    from ark_runtime.runtime import Runtime
    from tests.unit.test_states import counting_ring

    m = counting_ring(64)
    for t in m.tensors:
        if t.placement == "host":
            used = cupy.cuda.alloc_pinned_memory(t.nbytes)
            ctypes.memset(used.ptr, 0x5A, t.nbytes)
            del used  # back to the pool, its bytes unchanged
    with Runtime(m) as rt:
        assert rt.get("hpos").tolist() == [0] and not rt.get("ring").any()
        rt.run(2)
        assert [int(row[0]) for row in rt.stream("ring", "hpos")] == [1, 2]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_batch_of_sequences_each_at_its_own_position(gpu, dtype):
    """Four sequences, each appended at its own position the kernel counts on and attended over its own length: the
    output and both caches after each run against the reference over as many steps."""
    from ark_runtime.runtime import Runtime
    from tests.unit.test_states import batched_decode_step

    m = batched_decode_step(batch=4, capacity=32, heads=8, kv_heads=2, d=64, dtype=dtype)
    inputs = {**_inputs(m, 7), "pos": np.array([0, 5, 17, 2], np.int32)}
    ids = {t.name: t.id for t in m.tensors}
    with Runtime(m) as rt:
        for name, value in inputs.items():
            rt.set(name, value)
        for n in (1, 3, 9):
            rt.run(n - (rt.iterations_done or 0))
            rt.wait()
            want = evaluate(m, _rounded(m, inputs), iterations=n)
            got = rt.get(m.tensors[m.outputs[0]].name).astype(np.float64)
            assert np.abs(got - want[m.outputs[0]]).max() / max(1.0, float(np.abs(want[m.outputs[0]]).max())) \
                <= TOL[dtype], n
            assert rt.get("pos").tolist() == [n, 5 + n, 17 + n, 2 + n]
            for cache in ("cache_k", "cache_v"):
                assert np.abs(rt.get(cache).astype(np.float64) - want[ids[cache]]).max() <= TOL[dtype] * 4, cache
