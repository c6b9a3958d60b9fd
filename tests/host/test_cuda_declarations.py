"""The CUDA driver declarations the engine makes for itself (host/native/cuda_driver.h) against the
real cuda.h: every function pointer type exactly, every constant, the layout of the structs.
Needs a CUDA toolkit's headers (not a GPU); skipped where none is installed."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "host" / "native" / "cuda_driver.h"


def cuda_include() -> Path | None:
    candidates = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"))]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(Path(os.path.realpath(nvcc)).parents[1]))
    for c in candidates:
        if c and (Path(c) / "include" / "cuda.h").exists():
            return Path(c) / "include"
    return None


def compile_check(tu: str, tmp_path: Path, include: Path) -> None:
    src = tmp_path / "check.cpp"
    src.write_text(tu)
    proc = subprocess.run(
        [os.environ.get("CXX", "c++"), "-std=c++17", "-fsyntax-only", f"-I{HEADER.parent}", f"-I{include}", str(src)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.fixture(scope="module")
def include() -> Path:
    found = cuda_include()
    if found is None:
        pytest.skip("no CUDA toolkit headers (cuda.h) here")
    return found


def entries() -> list[tuple[str, str]]:
    found = re.findall(r'X\((\w+), "(\w+)",', HEADER.read_text())
    assert len(found) >= 20, "could not read the entry-point list from cuda_driver.h"
    return found


def test_every_function_pointer_type_is_the_real_declaration(include, tmp_path):
    checks = "\n".join(
        f'static_assert(std::is_same_v<c::Driver::PFN_{name}, decltype(&::{symbol})>, "{name} ({symbol})");'
        for name, symbol in entries()
    )
    compile_check(
        "#include <cuda.h>\n#include <type_traits>\n#define ARKDMA_CHECK_AGAINST_CUDA_H\n"
        '#include "cuda_driver.h"\nnamespace c = arkdma::cuda;\n' + checks + "\n"
        'static_assert(std::is_same_v<c::PFN_cuMemcpyBatchAsync, decltype(&::cuMemcpyBatchAsync_v2)>, "batch");\n',
        tmp_path, include,
    )


def test_constants_and_layouts_match_cuda_h(include, tmp_path):
    constants = re.findall(r"constexpr \w+ (CU\w+) =", HEADER.read_text())
    checks = "\n".join(f'static_assert(c::{n} == ::{n}, "{n}");' for n in constants)
    layout = "\n".join(
        f'static_assert(offsetof(c::CUmemcpyAttributes, {f}) == offsetof(::CUmemcpyAttributes, {f}), "{f}");'
        for f in ("srcAccessOrder", "srcLocHint", "dstLocHint", "flags")
    )
    compile_check(
        '#include <cstddef>\n#include "cuda_driver.h"\n#include <cuda.h>\nnamespace c = arkdma::cuda;\n'
        + checks + "\n" + layout + "\n"
        'static_assert(c::MEMHOSTALLOC_PORTABLE == CU_MEMHOSTALLOC_PORTABLE, "portable");\n'
        'static_assert(c::MEMHOSTALLOC_DEVICEMAP == CU_MEMHOSTALLOC_DEVICEMAP, "devicemap");\n'
        'static_assert(sizeof(c::CUmemcpyAttributes) == sizeof(::CUmemcpyAttributes), "attributes size");\n'
        'static_assert(sizeof(c::CUresult) == sizeof(::CUresult) && sizeof(c::CUdeviceptr) == sizeof(::CUdeviceptr), "");\n'
        'static_assert(sizeof(c::CUdevice_attribute) == sizeof(::CUdevice_attribute), "");\n',
        tmp_path, include,
    )
