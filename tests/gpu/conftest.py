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


@pytest.fixture(autouse=True)
def no_kernel_left_resident():
    """After each test, no loop kernel of this process may still run: one left running would make every later
    test's allocation wait for it for ever. A kernel still resident is halted; one that will not leave ends the
    session at once (naming it), rather than hanging the rest of the run."""
    yield
    import sys

    resident = sys.modules.get("ark_runtime.runtime.resident")
    if resident is None or not resident._RESIDENT:
        return
    names = ", ".join(k.name for k in list(resident._RESIDENT))
    stuck = [k.name for k in list(resident._RESIDENT) if not k.halt_quietly(5.0)]
    if stuck:
        pytest.exit(f"the loop kernel of {', '.join(stuck)} is still running after its test and would not leave: "
                    "later tests would hang behind it", returncode=3)
    pytest.fail(f"a test left the loop kernel of {names} resident (halted now)")
