"""Models imported from PyTorch, run by the Runtime on a GPU: tiny Llama, Qwen2 and BERT in bf16, every parameter
bound where PyTorch holds it (imported.bind), against the float64 reference and the module's own forward on the GPU
(within 6% of each output's largest magnitude, the loop tests' bf16 tolerance)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
pytest.importorskip("transformers", reason="transformers is not installed")

import ark_runtime  # noqa: E402
from ark_runtime.frontend import Source  # noqa: E402
from tests.unit.frontend_models import ARCHS, forward, ids, kwargs, tiny  # noqa: E402

pytestmark = pytest.mark.gpu
BF16_TOL = 6e-2


@pytest.mark.parametrize("arch", ARCHS)
def test_imported_models_run_with_their_parameters_bound(gpu, arch):
    from ark_runtime.runtime import Runtime

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: this torch sees none")
    model = tiny(arch, "sdpa", torch.bfloat16).cuda()
    x = ids(1 if arch == "bert" else 2).cuda()
    imported = ark_runtime.from_torch(model, (x,), kwargs(arch))
    bound = imported.bind(x, **kwargs(arch))
    params = dict(model.named_parameters())
    for b in imported.inputs:
        assert bound[b.name].is_cuda
        if b.source is Source.PARAMETER and not b.copied:  # no copy: the kernel reads PyTorch's own memory
            assert bound[b.name].data_ptr() == params[b.target].data_ptr()
    want = imported.reference(x, **kwargs(arch))
    theirs = forward(model, arch, x)
    with Runtime(imported.model, bind=bound) as rt:
        rt.run(2)
        rt.wait()
        got = [rt.get(o.name).astype(np.float64).reshape(o.shape) for o in imported.outputs]
    for g, w, t, o in zip(got, want, theirs, imported.outputs):
        scale = max(1.0, float(np.abs(w).max()))
        assert np.abs(g - w).max() / scale < BF16_TOL, o.name
        assert np.abs(g - t.double().cpu().numpy()).max() / scale < BF16_TOL, o.name
