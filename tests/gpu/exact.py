"""Ops whose results are exact (casts, moves of data, argmax): a model run on the GPU must give the float64
reference's values bit for bit (NaN where it has NaN), not within a tolerance."""

from __future__ import annotations

import numpy as np

from ark_runtime.model import Model
from ark_runtime.reference import evaluate
from tests.gpu.test_loop_runtime import _rounded


def check_exact(model: Model, inputs: dict[str, np.ndarray], iterations: int = 2, **kw) -> None:
    """Runs `model` on `inputs` (rounded to each input's dtype, as the GPU holds them) and asserts every output
    equals the reference exactly (the sign of a zero too), naming the first element that differs."""
    from ark_runtime.runtime import Runtime

    want = evaluate(model, _rounded(model, inputs))
    with Runtime(model, **kw) as rt:
        for k, v in inputs.items():
            rt.set(k, v)
        rt.run(iterations)
        rt.wait()
        got = {tid: rt.get(model.tensors[tid].name).astype(np.float64) for tid in model.outputs}
    for tid in model.outputs:
        t, ref = model.tensors[tid], want[tid]
        g = got[tid]
        same = ((g == ref) & (np.signbit(g) == np.signbit(ref))) | (np.isnan(g) & np.isnan(ref))  # -0 is not +0
        if not same.all():
            bad = np.argwhere(~same)
            first = tuple(int(i) for i in bad[0])
            raise AssertionError(f"{model.name}: {t.name}{list(t.shape)} ({t.dtype}) differs in {len(bad)} of "
                                 f"{same.size} elements, first at {first}: got {got[tid][first]!r}, want "
                                 f"{ref[first]!r}")
