"""The slice op (ops/slice.py, slice.cuh): columns [start, stop) of the last axis; its refusals, each tile reading
exactly the columns it copies (rows cut into column blocks too), plans that run tile by tile to the reference in every
dtype, and the kernel compiled for sm_90 and sm_90a. tests/gpu/test_op_slice.py runs it on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ark_runtime.kernel.codegen import INCLUDE_DIR
from ark_runtime.lower import LowerOptions, lower
from ark_runtime.model import Model, ModelError
from ark_runtime.reference import evaluate
from ark_runtime.scheduler import DeviceSpec
from ark_runtime.tiling import tile_model
from tests.unit.test_plan_reference import assert_plan_computes


def test_the_reference_takes_the_columns():
    m = Model("s")
    y = m.slice(m.input("x", (2, 3, 10)), 3, 7)
    m.output(y)
    x = np.arange(60.0).reshape(2, 3, 10)
    assert y.shape == (2, 3, 4) and dict(m.ops[0].attrs) == {"start": 3, "stop": 7}
    np.testing.assert_array_equal(evaluate(m, {"x": x})[y.id], x[..., 3:7])


@pytest.mark.parametrize("start, stop", [(-1, 4), (0, 11), (5, 5), (6, 5), (True, 4), (0, 4.0), (None, 4), ("0", 4),
                                         (0, None)])
def test_bad_bounds_are_refused_naming_the_op_and_the_rule(start, stop):
    m = Model("bad")
    x = m.input("x", (3, 10))
    with pytest.raises(ModelError, match=r"slice: start and stop must be ints with 0 <= start < stop <= 10 \(the last "
                                         r"axis of x \(3, 10\)\), not "):
        m.slice(x, start, stop)
    assert m.ops == []


def test_other_bad_calls_are_refused():
    m = Model("bad")
    x = m.input("x", (3, 10))
    with pytest.raises(ModelError, match=r"slice takes no argument step \(it takes start, stop\)"):
        m.op("slice", x, start=0, stop=4, step=2)
    with pytest.raises(ModelError, match=r"slice: start and stop must be ints .* not 0 and None"):
        m.op("slice", x, start=0)
    with pytest.raises(ModelError, match=r"slice takes 1 tensor\(s\), not 2"):
        m.op("slice", x, x, start=0, stop=4)


@pytest.mark.parametrize("shape, start, stop, sms", [((3, 20000), 1001, 19999, 16), ((400, 64), 8, 40, 5),
                                                     ((5, 9000), 0, 9000, 132)])
def test_each_tile_reads_the_columns_it_copies(shape, start, stop, sms):
    m = Model("s")
    m.output(m.slice(m.input("x", shape), start, stop))
    tiles = tile_model(m, sms)
    assert len(tiles) > 1
    for t in tiles:
        (r,) = t.reads
        assert (r.r0, r.r1, r.c0, r.c1) == (t.writes.r0, t.writes.r1, start + t.writes.c0, start + t.writes.c1)
    assert_plan_computes(m, sms)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 5), max_size=2), st.integers(1, 3000), st.data(), st.integers(1, 12),
       st.sampled_from(["fp32", "fp16", "bf16", "int32"]), st.integers(0, 3))
def test_random_slices_run_tile_by_tile_to_the_reference(lead, cols, data, sms, dtype, seed):
    start = data.draw(st.integers(0, cols - 1))
    stop = data.draw(st.integers(start + 1, cols))
    m = Model("s")
    m.output(m.slice(m.input("x", (*lead, cols), dtype), start, stop))
    assert_plan_computes(m, sms, seed)


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_the_kernel_compiles_in_every_dtype(arch):
    from driver.gpu import compile

    m = Model("slices")
    m.output(*(m.slice(m.input(f"x_{d}", (3, 37, 200), d), 7, 150) for d in ("fp32", "fp16", "bf16", "int32")))
    lw = lower(m, DeviceSpec(num_sms=132), LowerOptions(), cache=False)
    for ct in ("float", "__half", "__nv_bfloat16", "int"):
        assert f"ark::slice_tile<{ct}>(" in lw.source.text
    assert compile.cubin(lw.source.text, arch, (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"
