"""device.cuh without a GPU: it compiles with NVRTC and nvcc, its structs and codes match the Python
records field by field, a mismatch fails the check, and the compile cache keys on the headers' text."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from driver import abi, abi_codegen, dtypes
from driver.gpu import compile

ROOT = Path(__file__).resolve().parents[2]
DEVICE_HEADER = '#include "arkdma/device.cuh"\n'
KERNEL_SOURCES = sorted([*ROOT.glob("tests/gpu/*.cu"), *ROOT.glob("bench/kernels/*.cu")])
nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@pytest.fixture(scope="module")
def nvrtc():
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # ImportError, or libnvrtc missing
        pytest.skip(f"NVRTC is not available: {exc}")


def test_header_compiles_with_nvrtc(nvrtc):
    """abi.h checks every record's size and every field's size as it compiles (offsets need nvcc)."""
    assert compile.cubin(DEVICE_HEADER)[:4] == b"\x7fELF"


@nvcc
def test_header_offsets_hold_with_nvcc():
    assert compile.nvcc_cubin(DEVICE_HEADER)[:4] == b"\x7fELF"


def _edited_include(tmp_path, monkeypatch, old: str, new: str) -> None:
    """An include folder whose abi.h has `old` replaced by `new`, used by the compile path from now on."""
    copy = tmp_path / "include"
    shutil.copytree(compile.INCLUDE_DIR, copy)
    header = copy / "arkdma/abi.h"
    text = header.read_text()
    assert old in text
    header.write_text(text.replace(old, new))
    monkeypatch.setattr(compile, "INCLUDE_DIR", copy)
    compile.headers_digest.cache_clear()


@nvcc
def test_a_field_moved_in_the_header_fails_the_build(tmp_path, monkeypatch):
    _edited_include(tmp_path, monkeypatch, "  uint64_t expected;  /* +16", "  uint32_t pad; uint64_t expected;  /* +16")
    try:
        with pytest.raises(compile.CompileError, match="arkdma_status"):
            compile.nvcc_cubin(DEVICE_HEADER)
    finally:
        compile.headers_digest.cache_clear()


def test_a_record_grown_in_the_header_fails_the_build(nvrtc, tmp_path, monkeypatch):
    _edited_include(tmp_path, monkeypatch, "  uint32_t id;  /* +52", "  uint64_t id;  /* +52")
    try:
        with pytest.raises(compile.CompileError, match="arkdma_queue"):
            compile.cubin(DEVICE_HEADER)
    finally:
        compile.headers_digest.cache_clear()


def test_device_records_and_codes_come_from_the_abi():
    """device.cuh declares no record or code of its own; abi.h, generated from driver/abi.py, has them all
    and is up to date; the NumPy dtypes are made from the same records."""
    device = (compile.INCLUDE_DIR / "arkdma/device.cuh").read_text()
    assert "typedef struct" not in device and "#define ARKDMA_DEV_" not in device
    assert abi_codegen.stale_files() == []
    header = (compile.INCLUDE_DIR / "arkdma/abi.h").read_text()
    for code in abi.DeviceCode:
        assert f"#define ARKDMA_DEV_{code.name} {code.value}u" in header
    for site in abi.Site:
        if site is not abi.Site.NONE:
            assert f"#define ARKDMA_DEV_SITE_{site.name} {site.value}u" in header
    for rec, dt in ((abi.QUEUE_HANDLE, dtypes.QUEUE_DTYPE), (abi.STATUS, dtypes.STATUS_DTYPE),
                    (abi.PRODUCER, dtypes.PRODUCER_DTYPE)):
        assert dt.itemsize == rec.size and list(dt.names) == [f.name for f in rec.fields]
        assert f"ARKDMA_STATIC_ASSERT(sizeof(arkdma_{rec.name}) == {rec.size}" in header
        for f in rec.fields:
            assert f"offsetof(arkdma_{rec.name}, {f.name}) == {f.offset}" in header


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
