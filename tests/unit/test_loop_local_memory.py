"""The loop kernel uses no local memory (NVRTC's ptxas report, no GPU): on the H100 we measured, while a kernel with
any local memory was resident no other kernel started, whatever room the SMs had, so a graph copy launched ahead of
its data (copy.cuh's gate kernel) would never start. The kernel's parameters are __grid_constant__ (referenced where
they are, not copied to the stack) and its device functions inline into it, with graph copies (relocatable code) and
without."""

from __future__ import annotations

import re

import pytest

from ark_runtime import models
from ark_runtime.fusion import fuse
from ark_runtime.plan import build_plan
from ark_runtime.scheduler import DeviceSpec
from ark_runtime.split_k import split_k

cupy = pytest.importorskip("cupy", reason="the gpu extra (CuPy, NVRTC) is not installed")

H100 = DeviceSpec(num_sms=132)


def _stack_frames(text: str, rdc: bool) -> dict[str, int]:
    """Each function's stack frame in bytes, as ptxas reports it for sm_90a."""
    from cupy.cuda import nvrtc

    from ark_runtime.kernel.codegen import INCLUDE_DIR
    from driver.gpu import compile

    prog = nvrtc.createProgram(text, "ark_kernel.cu", [], [])
    opts = compile.options((f"-I{INCLUDE_DIR}", "-ftz=true", "--ptxas-options=-v", *(("-rdc=true",) if rdc else ())))
    nvrtc.compileProgram(prog, [*opts, "--gpu-architecture=sm_90a"])
    log = nvrtc.getProgramLog(prog)
    log = log.decode() if isinstance(log, bytes) else log
    found = re.findall(r"Function properties for (\S+)\s*\n\s*ptxas\s*\.\s*(\d+) bytes stack frame", log)
    return {name: int(size) for name, size in found}


@pytest.mark.parametrize(("name", "graphs"), [("copy8k", True), ("chain64", False), ("mlp-b8", False),
                                              ("block-s128", False)])
def test_the_loop_kernel_has_no_stack(name, graphs):
    from ark_runtime.kernel.codegen import generate

    model = split_k(fuse(models.copy_out(8192) if name == "copy8k" else models.named(name)), H100)
    frames = _stack_frames(generate(model, build_plan(model, H100), graph_copies=graphs).text, graphs)
    assert frames.get("ark_loop") == 0, frames
    assert not {f: s for f, s in frames.items() if s}, f"functions with a stack frame: {frames}"
