"""The examples: their kernels compile without a GPU; on a GPU they run and check every byte."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_offload_kernel_compiles_with_nvrtc():
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # CuPy or libnvrtc missing
        pytest.skip(f"NVRTC is not available: {exc}")
    from driver.gpu import compile

    assert compile.cubin((EXAMPLES / "offload_kernel.cu").read_text())[:4] == b"\x7fELF"


def test_offload_example_refuses_bad_arguments(capsys):
    from examples.offload_from_kernel import main

    with pytest.raises(SystemExit):
        main(["--floats", "7"])
    assert "multiple of" in capsys.readouterr().err


@pytest.mark.gpu
def test_offload_example_runs_on_a_gpu(capsys):
    from driver.gpu.launch import gpu_unavailable_reason
    from examples.offload_from_kernel import main

    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"needs a CUDA GPU: {reason}")
    assert main(["--steps", "6", "--floats", str(1 << 18)]) == 0
    assert "every byte checked" in capsys.readouterr().out
