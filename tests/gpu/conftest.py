"""The `gpu` fixture of the GPU tests that run kernels: skips without a CUDA GPU, and on the driver test double
(which takes calls but runs no kernel). A module may define its own `gpu` to ask for less or more."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def gpu():
    from driver.gpu.launch import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"needs a CUDA GPU: {reason}")
    from host import native

    if native.unavailable_reason() is None and native.cuda_probe().name.startswith("Fake CUDA device"):
        pytest.skip("needs a real GPU to run kernels")
