"""The loop kernel against PyTorch: random DAGs of every op kind, in fp32 and bf16, run as one resident kernel with
the inputs bound as PyTorch tensors (DLPack, no copy), and the same DAG run op by op in PyTorch on the same tensors
(`torch_model.py`). That translation is itself checked against the float64 reference first. Skips without a GPU
or PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ark_runtime.reference import evaluate
from tests.gpu import torch_model
from tests.gpu.test_loop_runtime import TOL, _inputs, _rounded
from tests.unit.model_strategies import models

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

# between two implementations that each round in the tensors' dtype: twice what either may be off by against
# float64 (fp32 PyTorch is exact to about 1e-6 with TF32 off, so there the kernel's own bound holds)
BETWEEN = {"fp32": TOL["fp32"], "bf16": 2 * TOL["bf16"]}


@pytest.fixture
def exact_fp32():
    """fp32 matmuls and attention in IEEE fp32 (PyTorch may use TF32 on tensor cores otherwise)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=models("fp32"))
def test_pytorch_op_by_op_agrees_with_the_float64_reference(gpu, exact_fp32, model):
    values = _inputs(model)
    got = torch_model.run(torch, model, torch_model.inputs_for(torch, model, values))
    want = evaluate(model, _rounded(model, values))
    for tid in model.outputs:
        why = torch_model.mismatch(got[tid].double().cpu().numpy(), want[tid], 1e-4)
        assert why is None, f"{model.tensors[tid].name}: {why}"


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_models_match_pytorch_op_by_op(gpu, exact_fp32, dtype, data):
    from ark_runtime.runtime import Runtime

    model = data.draw(models(dtype))
    inputs = torch_model.inputs_for(torch, model, _inputs(model))
    want = torch_model.run(torch, model, inputs)  # before the kernel is resident: PyTorch allocates
    torch.cuda.synchronize()
    with Runtime(model, bind=inputs) as rt:
        rt.run(2)
        rt.wait()
        got = {tid: rt.get(model.tensors[tid].name) for tid in model.outputs}
    for tid in model.outputs:
        why = torch_model.mismatch(got[tid].astype(np.float64), want[tid].double().cpu().numpy(), BETWEEN[dtype])
        assert why is None, f"{model.name} ({dtype}): {model.tensors[tid].name}: {why}"
