"""The concat op (ops/concat.py, concat.cuh): two tensors joined along the last axis; its refusals, each tile reading
exactly the columns of each input it copies (tiles across the seam read both, others one), plans that run tile by
tile to the reference in every dtype, and the kernel compiled for sm_90 and sm_90a. tests/gpu/test_op_concat.py runs
it on a GPU."""

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


def _model(lead, da, db, dtype="fp32"):
    m = Model("c")
    m.output(m.concat(m.input("a", (*lead, da), dtype), m.input("b", (*lead, db), dtype)))
    return m


def test_the_reference_joins_the_last_axis():
    m = _model((2, 3), 4, 5)
    a, b = np.arange(24.0).reshape(2, 3, 4), -np.arange(30.0).reshape(2, 3, 5)
    y = evaluate(m, {"a": a, "b": b})[m.outputs[0]]
    assert m.tensors[m.outputs[0]].shape == (2, 3, 9)
    np.testing.assert_array_equal(y, np.concatenate([a, b], -1))


def test_bad_calls_are_refused_naming_the_op_and_what_to_change():
    m = Model("bad")
    a = m.input("a", (2, 3, 4))
    with pytest.raises(ModelError, match=r"concat: a \(2, 3, 4\) and b \(2, 5, 4\) must agree on every axis but the "
                                         r"last \(no broadcast\)"):
        m.concat(a, m.input("b", (2, 5, 4)))
    with pytest.raises(ModelError, match=r"concat: a \(2, 3, 4\) and r \(3, 4\) must agree"):
        m.concat(a, m.input("r", (3, 4)))
    with pytest.raises(ModelError, match=r"concat: a \(2, 3, 4\) and o \(1, 3, 4\) must agree"):
        m.concat(a, m.input("o", (1, 3, 4)))
    with pytest.raises(ModelError, match=r"concat: a is fp32 but h is fp16; cast one first"):
        m.concat(a, m.input("h", (2, 3, 4), "fp16"))
    with pytest.raises(ModelError, match=r"concat takes no argument axis"):
        m.op("concat", a, a, axis=0)
    with pytest.raises(ModelError, match=r"concat takes 2 tensor\(s\), not 3"):
        m.op("concat", a, a, a)
    assert m.ops == []


@pytest.mark.parametrize("lead, da, db, sms", [((3,), 9000, 11000, 16), ((400,), 24, 40, 5), ((5,), 1, 9000, 132),
                                               ((2, 3), 7, 5, 4)])
def test_each_tile_reads_the_columns_of_each_input_it_copies(lead, da, db, sms):
    m = _model(lead, da, db)
    for t in tile_model(m, sms):
        w = t.writes
        want = []
        if w.c0 < da:
            want.append((0, w.r0, w.r1, w.c0, min(w.c1, da)))
        if w.c1 > da:
            want.append((1, w.r0, w.r1, max(w.c0, da) - da, w.c1 - da))
        assert [(r.tensor, r.r0, r.r1, r.c0, r.c1) for r in t.reads] == want
    assert_plan_computes(m, sms)


def test_a_tensor_joined_to_itself():
    m = Model("c")
    x = m.input("x", (5, 7), "int32")
    m.output(m.concat(x, x))
    assert_plan_computes(m, 3)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 5), max_size=2), st.integers(1, 3000), st.integers(1, 3000), st.integers(1, 12),
       st.sampled_from(["fp32", "fp16", "bf16", "int32"]), st.integers(0, 3))
def test_random_concats_run_tile_by_tile_to_the_reference(lead, da, db, sms, dtype, seed):
    assert_plan_computes(_model(lead, da, db, dtype), sms, seed)


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_the_kernel_compiles_in_every_dtype(arch):
    from driver.gpu import compile

    m = Model("concats")
    m.output(*(m.concat(m.input(f"a_{d}", (3, 37, 200), d), m.input(f"b_{d}", (3, 37, 13), d))
               for d in ("fp32", "fp16", "bf16", "int32")))
    lw = lower(m, DeviceSpec(num_sms=132), LowerOptions(), cache=False)
    for ct in ("float", "__half", "__nv_bfloat16", "int"):
        assert f"ark::concat_tile<{ct}>(" in lw.source.text
    assert compile.cubin(lw.source.text, arch, (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"
