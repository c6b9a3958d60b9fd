"""device.cuh without a GPU: it compiles with NVRTC and nvcc, its structs and codes match the Python
records field by field, a mismatch fails the check, and the compile cache keys on the headers' text."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from driver.gpu import compile, layout

ROOT = Path(__file__).resolve().parents[2]
KERNEL_SOURCES = sorted([*ROOT.glob("tests/gpu/*.cu"), *ROOT.glob("bench/kernels/*.cu")])
nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@pytest.fixture(scope="module")
def nvrtc():
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # ImportError, or libnvrtc missing
        pytest.skip(f"NVRTC is not available: {exc}")


def test_header_structs_and_codes_match_python_with_nvrtc(nvrtc):
    assert compile.cubin(layout.layout_assertions(offsets=False))[:4] == b"\x7fELF"


@nvcc
def test_header_offsets_match_python_with_nvcc():
    assert compile.nvcc_cubin(layout.layout_assertions())[:4] == b"\x7fELF"


@nvcc
def test_a_wrong_offset_fails_the_check():
    wrong = layout.layout_assertions().replace("offsetof(arkdma_status, observed) == 24", "offsetof(arkdma_status, observed) == 32")
    assert wrong != layout.layout_assertions()
    with pytest.raises(compile.CompileError, match="arkdma_status.observed at"):
        compile.nvcc_cubin(wrong)


def test_a_wrong_code_fails_the_check(nvrtc):
    wrong = layout.layout_assertions(offsets=False).replace("ARKDMA_DEV_TIMEOUT == 2u", "ARKDMA_DEV_TIMEOUT == 3u")
    with pytest.raises(compile.CompileError, match="ARKDMA_DEV_TIMEOUT is"):
        compile.cubin(wrong)


def test_every_python_code_is_checked():
    text = layout.layout_assertions(offsets=False)
    for code in layout.DeviceCode:
        assert f"ARKDMA_DEV_{code.name} == {code.value}u" in text
    header = (compile.INCLUDE_DIR / "arkdma/device.cuh").read_text()
    defined = {line.split()[1] for line in header.splitlines() if line.startswith("#define ARKDMA_DEV_")}
    assert defined == set(layout.C_CODES), "device.cuh defines codes Python does not know (or the reverse)"


@pytest.mark.parametrize("source", KERNEL_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_kernels_compile_with_nvrtc(nvrtc, source):
    compile.cubin(source.read_text(), name=source.name)


@nvcc
@pytest.mark.parametrize("source", KERNEL_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_kernels_compile_with_nvcc(source):
    compile.nvcc_cubin(source.read_text())


def test_kernel_sources_exist():
    assert any(p.parent.name == "gpu" for p in KERNEL_SOURCES), "the GPU tests' kernels moved; update KERNEL_SOURCES"


def test_compile_errors_carry_the_log(nvrtc):
    with pytest.raises(compile.CompileError, match="has no member \"no_such_call\""):
        compile.cubin('#include "arkdma/device.cuh"\n__global__ void k() { arkdma::no_such_call(); }')


def test_cache_key_follows_the_headers(tmp_path, monkeypatch):
    copy = tmp_path / "include"
    shutil.copytree(compile.INCLUDE_DIR, copy)
    monkeypatch.setattr(compile, "INCLUDE_DIR", copy)
    compile.headers_digest.cache_clear()
    before = compile._keyed("k")
    (copy / "arkdma/device.cuh").write_text((copy / "arkdma/device.cuh").read_text() + "\n// edited\n")
    compile.headers_digest.cache_clear()
    after = compile._keyed("k")
    compile.headers_digest.cache_clear()
    assert before != after and before.endswith("\nk") and after.endswith("\nk")
