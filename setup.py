"""Builds the software engine's native library (host/native/*.cpp -> host/libarkdma_engine.so).

Only a C++17 compiler is needed: the CUDA driver is loaded at run time, and the ABI constants
come from the generated header driver/include/arkdma/abi.h. The library is a plain shared
object loaded with ctypes (no Python C API), so one build serves every Python version.
Everything else about the package is in pyproject.toml.
"""

from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NATIVE = "host.libarkdma_engine"


class BuildNativeLibrary(build_ext):
    """build_ext that names the library plainly and exports only its C API (no PyInit_ symbol)."""

    def get_ext_filename(self, fullname: str) -> str:
        # Asked both with the full dotted name and with its last part alone.
        if NATIVE == fullname or NATIVE.endswith("." + fullname):
            return str(Path(*fullname.split("."))) + ".so"
        return super().get_ext_filename(fullname)

    def get_export_symbols(self, ext: Extension) -> list[str]:
        return ext.export_symbols or []


engine = Extension(
    NATIVE,
    sources=sorted(str(p) for p in Path("host/native").glob("*.cpp")),
    depends=sorted(str(p) for p in Path("host/native").glob("*.h")) + ["driver/include/arkdma/abi.h"],
    include_dirs=["driver/include"],
    language="c++",
    extra_compile_args=["-std=c++17", "-O2", "-g0", "-fvisibility=hidden", "-Wall", "-Wextra"],
    extra_link_args=["-pthread"],
    libraries=["dl"],
)

setup(ext_modules=[engine], cmdclass={"build_ext": BuildNativeLibrary})
