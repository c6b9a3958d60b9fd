"""Two unary functions added through the op-spec path (ark_runtime/ops/unary.py, numeric.cuh): tanh, and GELU in its
erf form (PyTorch's default, BERT's). Their float64 references, every pass on a model using them alone, in a fused
chain and in a matmul's epilogue, and the kernel compiled for sm_90 and sm_90a. tests/gpu/test_op_tanh_gelu_erf.py
runs them on a GPU against the reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ark_runtime.kernel.codegen import INCLUDE_DIR
from ark_runtime.lower import LowerOptions, lower
from ark_runtime.model import Model
from ark_runtime.reference import evaluate, run_plan
from ark_runtime.scheduler import DeviceSpec

FNS = ("tanh", "gelu_erf")


def test_the_references_are_the_textbook_functions():
    from ark_runtime.ops.unary import FNS as TABLE

    x = np.linspace(-6, 6, 101)
    assert np.allclose(TABLE["tanh"][0](x), np.tanh(x), rtol=0, atol=0)
    want = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    assert np.allclose(TABLE["gelu_erf"][0](x), want, rtol=0, atol=1e-15)
    assert TABLE["gelu_erf"][0](np.array([0.0]))[0] == 0.0 and TABLE["tanh"][0](np.array([50.0]))[0] == 1.0


def _model(fn: str, dtype: str = "fp32") -> Model:
    m = Model(f"{fn}-uses")
    x, w = m.input("x", (24, 64), dtype), m.input("w", (64, 64), dtype)
    alone = m.unary(fn, x)
    chained = m.unary("neg", m.unary(fn, m.unary("silu", x)))
    epilogue = m.unary(fn, m.matmul(x, w))
    m.output(alone, chained, epilogue)
    return m


@pytest.mark.parametrize("fn", FNS)
def test_each_pass_takes_them_and_the_plan_computes_the_reference(fn):
    m = _model(fn)
    lw = lower(m, DeviceSpec(num_sms=8))
    kinds = {op.kind for op in lw.model.ops}
    assert "fused" in kinds  # the chain ran as one op
    assert any(fn == step[0] for op in lw.model.ops for step in (op.attr("epilogue") or ()))  # in the matmul's stores
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((24, 64)), "w": rng.standard_normal((64, 64)) / 8}
    want = evaluate(m, inputs)
    got = run_plan(lw.plan, lw.model, inputs)
    for src, dst in zip(m.outputs, lw.model.outputs):
        assert np.allclose(got[dst], want[src], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fn", FNS)
@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_the_kernel_compiles(fn, arch):
    from driver.gpu import compile

    lw = lower(_model(fn, "bf16"), DeviceSpec(num_sms=132), LowerOptions())
    assert f"ark::{'TANH' if fn == 'tanh' else 'GELU_ERF'}" in lw.source.text
    assert compile.cubin(lw.source.text, arch, (f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"


def test_an_unknown_function_names_the_known_ones():
    from ark_runtime.model import ModelError

    m = Model("bad")
    with pytest.raises(ModelError, match="'erf_gelu' is not one of .*tanh, gelu_erf"):
        m.unary("erf_gelu", m.input("x", (2, 2)))
