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


@pytest.mark.parametrize("args, says", [
    (["--hidden", "100", "--heads", "8"], "not a multiple of --heads"),
    (["--seq", "0"], "--seq must be at least 1"),
    (["--dtype", "int8"], "invalid choice"),
])
def test_loop_model_example_refuses_bad_arguments(args, says, capsys):
    from examples.loop_model import main

    with pytest.raises(SystemExit):
        main(args)
    assert says in capsys.readouterr().err


def test_loop_model_example_plans_and_compiles_without_a_gpu():
    from ark_runtime.kernel.codegen import generate
    from ark_runtime.plan import build_plan
    from ark_runtime.scheduler import DeviceSpec
    from driver.gpu import compile
    from ark_runtime.kernel.codegen import INCLUDE_DIR
    from examples.loop_model import block

    m = block(32, 128, 4, "bf16")
    assert [op.kind for op in m.ops][-1] == "copy"
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # CuPy or libnvrtc missing
        pytest.skip(f"NVRTC is not available: {exc}")
    src = generate(m, build_plan(m, DeviceSpec(num_sms=16, wgmma=False)))
    assert compile.cubin(src.text, extra=(f"-I{INCLUDE_DIR}",))[:4] == b"\x7fELF"


@pytest.mark.gpu
def test_loop_model_example_runs_on_a_gpu(capsys):
    from driver.gpu.launch import gpu_unavailable_reason
    from examples.loop_model import main

    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"needs a CUDA GPU: {reason}")
    assert main(["--seq", "64", "--hidden", "256", "--heads", "4", "--iterations", "5"]) == 0
    out = capsys.readouterr().out
    assert "largest error against float64" in out and "copy of" in out and "iteration" in out


@pytest.mark.parametrize("args, says", [(["--new", "0"], "must be at least 1"), (["--prompt", "x"], "invalid int"),
                                        (["--batch", "0"], "must be at least 1"),
                                        (["--temperature", "-1"], "--temperature must be 0 (greedy)"),
                                        (["--temperature", "nan"], "--temperature must be 0 (greedy)"),
                                        (["--temperature", "1", "--top-p", "0"], "--top-p in (0, 1]"),
                                        (["--temperature", "1", "--top-k", "-2"], "--top-k must be at least 0"),
                                        (["--temperature", "1", "--seed", "-1"], "--seed in 0 .. 2**64 - 1"),
                                        (["--top-k", "5"], "give --temperature above 0 with them"),
                                        (["--top-p", "0.5"], "give --temperature above 0 with them")])
def test_generate_example_refuses_bad_arguments(args, says, capsys):
    from examples.generate import parse

    with pytest.raises(SystemExit):
        parse(args)
    assert says in capsys.readouterr().err


def test_generate_example_judges_where_each_text_parts_from_pytorchs():
    from examples.generate import parting

    theirs = [[1, 1, 1], [2, 2, 2], [3, 3, 3], [4, 4, 4]]  # steps x 3 sequences
    gaps = [[0.5, 0.5, 0.5], [0.01, 0.3, 0.5], [0.5, 0.02, 0.5], [0.5, 0.5, 0.5]]
    ours = [[1, 1, 1], [9, 2, 2], [9, 9, 3], [9, 9, 4]]  # b0 parts at step 1 (a near tie), b1 at 2 (2%: one too)
    assert parting(ours, theirs, gaps) == ([1, 2, None], 2, 0)
    ours[3][2] = 7  # b2 parts at step 3, where PyTorch's top two were 50% apart: a wrong token
    assert parting(ours, theirs, gaps) == ([1, 2, 3], 2, 1)
    assert parting(ours, theirs, gaps, near=0.0) == ([1, 2, 3], 0, 3)
    assert parting(theirs, theirs, gaps) == ([None, None, None], 0, 0)
    assert parting(ours[:2], theirs, gaps) == ([1, None, None], 1, 0)  # only the steps both made


@pytest.mark.gpu
def test_generate_example_runs_on_a_gpu(capsys):
    pytest.importorskip("transformers", reason="the `torch` extra (PyTorch, transformers) is not installed")
    from driver.gpu.launch import gpu_unavailable_reason
    from examples.generate import main

    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"needs a CUDA GPU: {reason}")
    for batch in ("1", "3"):
        assert main(["--tiny", "--prompt", "8", "--new", "12", "--batch", batch]) == 0
        out = capsys.readouterr().out
        assert "tokens/s" in out and f"a step of {batch}" in out
        agree, total = (int(n) for n in out.split("greedy tokens equal to PyTorch's: ")[1].split()[0:3:2])
        assert total == 12 * int(batch) and agree >= total * 3 // 4, out
        assert "texts that part from PyTorch's: " in out and " elsewhere" not in out.replace(" 0 elsewhere", ""), out
    assert main(["--tiny", "--prompt", "8", "--new", "12", "--batch", "2", "--temperature", "0.8", "--top-k", "40",
                 "--top-p", "0.9", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert "tokens/s" in out and "sampled (temperature 0.8, top-k 40, top-p 0.9, seed 5)" in out
    assert "greedy tokens equal" not in out
