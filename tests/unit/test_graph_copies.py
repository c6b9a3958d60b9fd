"""The device-graph copy path without a GPU: a kernel with graph copies compiles as relocatable code for sm_90 and
sm_90a (NVRTC), and only such kernels launch graphs; the constants the host and the kernel share are checked in
every kernel; bad memory kinds and a missing device runtime are refused with what to do."""

from __future__ import annotations

import pytest

from ark_runtime import models
from ark_runtime.kernel.codegen import INCLUDE_DIR, generate
from ark_runtime.model import Model
from ark_runtime.plan import build_plan
from ark_runtime.scheduler import DeviceSpec

cupy = pytest.importorskip("cupy", reason="the gpu extra (CuPy, NVRTC) is not installed")


def _mid_model() -> Model:
    m = Model("graph_mid")
    x = m.input("x", (300, 257), "fp32")
    y = m.copy(m.unary("neg", x), "device")
    m.output(m.binary("add", y, x), m.copy(y, "host"))
    return m


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
@pytest.mark.parametrize("model", [models.copy_out(8192), _mid_model()], ids=["copy8k", "mid"])
def test_a_kernel_with_graph_copies_compiles_as_relocatable_code(arch, model):
    from driver.gpu import compile

    src = generate(model, build_plan(model, DeviceSpec(num_sms=132)), graph_copies=True)
    assert src.graph_copies and "#define ARK_GRAPH_COPIES 1" in src.text
    cubin = compile.cubin(src.text, arch, (f"-I{INCLUDE_DIR}", "-rdc=true"))
    assert cubin[:4] == b"\x7fELF" and b"ark_graph_gate" in cubin  # a gated copy graph's first node


def test_only_kernels_with_graph_copies_launch_graphs():
    """Without graph copies the kernel has no device-side launch: it needs no device runtime and is built as
    before (a device-side cudaGraphLaunch does not compile without -rdc)."""
    from driver.gpu import compile

    m = models.copy_out(8192)
    plain = generate(m, build_plan(m, DeviceSpec(num_sms=132)))
    assert not plain.graph_copies and "#define ARK_GRAPH_COPIES 0" in plain.text
    assert b"ark_graph_gate" not in compile.cubin(plain.text, "sm_90", (f"-I{INCLUDE_DIR}",))
    with_graphs = generate(m, build_plan(m, DeviceSpec(num_sms=132)), graph_copies=True)
    with pytest.raises(compile.CompileError):
        compile.cubin(with_graphs.text, "sm_90", (f"-I{INCLUDE_DIR}",))


@pytest.mark.parametrize(("src", "dst"), [("gpu", "host"), ("device", "pinned"), ("", "device")])
def test_a_copy_graph_refuses_unknown_memory_kinds(src, dst):
    from driver.gpu.device_graphs import DeviceGraphError, copy_graph

    with pytest.raises(DeviceGraphError, match="each is 'host' or 'device'"):
        copy_graph(None, 0, dst, 0, src, 8, 0, 0, "test")


def test_linking_without_the_device_runtime_says_what_to_install(monkeypatch):
    from driver.gpu import compile

    monkeypatch.setattr(compile, "cudadevrt_path", lambda: None)
    with pytest.raises(compile.CompileError, match="libcudadevrt.a.*install the `gpu` extra"):
        compile._load_linked("// nothing", (), "sm_90", False)


def test_the_device_runtime_is_found_where_the_gpu_extra_puts_it():
    from driver.gpu import compile

    path = compile.cudadevrt_path()
    if path is None:
        pytest.skip("no libcudadevrt.a here (the gpu extra's nvidia-cuda-runtime wheel is not installed)")
    assert path.name == "libcudadevrt.a" and path.stat().st_size > 0


H100_SM = {"maxThreadsPerMultiProcessor": 2048, "regsPerMultiprocessor": 65536, "sharedMemPerMultiprocessor": 233472,
           "reservedSharedMemPerBlock": 1024, "maxBlocksPerMultiProcessor": 32}


@pytest.mark.parametrize(("loop", "fits"), [
    ((256, 156, 200 * 1024), True),  # a matmul model's loop kernel
    ((256, 168, 227 * 1024), False),  # the opt-in maximum of shared memory: nothing left for the gate's block
    ((256, 255, 1024), False),  # 255 registers a thread: the warps' units take all 65,536
    ((2048, 32, 0), False),  # every warp slot
    ((256, 224, 225 * 1024), True),
])
def test_the_gate_runs_beside_the_loop_kernel_only_where_an_sm_has_room(loop, fits):
    """Runtime launches graph copies ahead only where ark_graph_gate's block (32 threads) fits beside the loop
    kernel's: else a launch made ahead would never start."""
    from driver.gpu.launch import fit_together

    assert fit_together(H100_SM, [loop, (32, 16, 0)]) is fits
    assert fit_together(H100_SM, [loop]) is (loop[0] <= 2048)
