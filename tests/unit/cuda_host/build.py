"""Builds a cuda_host program (a .cpp that runs a row op's CUDA template on the host through cuda_on_host.h) with the
system's C++ compiler, once per set of defines a session; skips where there is no compiler or no C++20 <barrier>."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ark_runtime.kernel.codegen import INCLUDE_DIR

HERE = Path(__file__).resolve().parent
_BUILT: dict[tuple, Path] = {}


def build_on_host(source: str, defines: dict[str, str], tmp_path_factory) -> Path:
    """HERE/source built with -D name=value for each of `defines`: the executable's path."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip(f"no C++ compiler to build {source} for the host")
    key = (source, tuple(sorted(defines.items())))
    if key not in _BUILT:
        name = "_".join([Path(source).stem, *(str(v).replace(" ", "") for v in defines.values())])
        exe = tmp_path_factory.mktemp("cuda_host") / name
        done = subprocess.run([cxx, "-std=c++20", "-O2", "-pthread", "-Wno-unknown-pragmas", f"-I{INCLUDE_DIR}",
                               *(f"-D{k}={v}" for k, v in defines.items()), str(HERE / source), "-o", str(exe)],
                              capture_output=True, text=True)
        if done.returncode:
            if "barrier" in done.stderr and "No such file" in done.stderr:
                pytest.skip("the C++ compiler has no C++20 <barrier>")
            raise AssertionError(done.stderr[-4000:])
        _BUILT[key] = exe
    return _BUILT[key]
