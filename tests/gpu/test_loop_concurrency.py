"""Other kernels beside the resident loop kernel: on SMs the loop kernel leaves free (`Runtime(sms=...)`), a
kernel launched on another stream runs while the loop kernel is resident. Skips without a GPU."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.gpu

KERNEL = r"""
extern "C" __global__ void bump(int* x) { atomicAdd(x, 1); }
"""


@pytest.fixture(scope="module")
def gpu():
    from driver.gpu.launch import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"needs a CUDA GPU: {reason}")


def _runs_beside(sms_free: int, wait_s: float = 2.0) -> bool:
    """Whether a one-block kernel on another stream finishes while the loop kernel holds all but `sms_free` SMs."""
    import cupy

    from ark_runtime import models
    from ark_runtime.runtime import Runtime

    fn = cupy.RawKernel(KERNEL, "bump")
    x = cupy.zeros(1, cupy.int32)
    fn((1,), (1,), (x,))  # loaded and launched once before: no module load while the loop kernel runs
    cupy.cuda.Device().synchronize()
    total = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    stream = cupy.cuda.Stream(non_blocking=True)
    with Runtime(models.chain(4, rows=64, cols=256), sms=total - sms_free) as rt:
        rt.run(1)
        rt.wait()
        with stream:
            fn((1,), (1,), (x,))
        done = cupy.cuda.Event()
        done.record(stream)
        t0 = time.monotonic()
        while not done.done and time.monotonic() - t0 < wait_s:
            time.sleep(1e-3)
        ran = done.done
    stream.synchronize()  # the loop kernel has left: the kernel runs now if it had not
    assert int(x.get()[0]) == 2
    return ran


def test_a_kernel_runs_on_the_sms_the_loop_kernel_leaves_free(gpu):
    assert _runs_beside(sms_free=4)

