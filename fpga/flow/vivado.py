"""The Vivado flow for PCIe cards: `build` writes the card top's Verilog, the XDC, the PCIe IP's configuration and
the project Tcl into a build folder, checks them, and runs Vivado (batch mode, progress from its log) where it is
installed; `flash` writes the hardware-manager Tcl that loads a bitstream or the flash image and runs it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from fpga.boards import board as pcie_board
from fpga.boards.spec import PcieBoard
from fpga.cores.pcie4_ip import blackbox_verilog
from fpga.cores.pcie_card_top import TOP_NAME, USER_CLOCK_MHZ
from fpga.errors import FpgaFlowError, ToolFailed, ToolMissing
from fpga.flow import vivado_checks
from fpga.flow.vivado_ip import check_ip_config, ip_config
from fpga.flow.vivado_project import BUILD_STEPS, STEP, ProjectFiles, flash_tcl, project_tcl, xdc
from rtl.params import EngineParams

VIVADO_ENV = "VIVADO"  # the vivado executable, when it is not on PATH
INSTALL_VIVADO = ("install AMD Vivado (2022.2 or newer, with UltraScale+ devices; its licence must cover the "
                  "board's part) and `source <Vivado>/settings64.sh`, or set VIVADO to the vivado executable")
FILES = ProjectFiles(top=TOP_NAME, verilog=f"{TOP_NAME}.v", xdc=f"{TOP_NAME}.xdc")
BLACKBOXES = "blackboxes.v"  # for the check without Vivado; not part of the project
BUILD_TCL, FLASH_TCL = "build.tcl", "flash.tcl"


@dataclass
class VivadoBuild:
    board: str
    folder: str
    vivado: str | None  # the vivado that ran, None when it did not (absent, or --dry-run)
    checks: list[str]  # what was checked before (and without) Vivado
    bitstream: str | None = None
    flash_image: str | None = None
    seconds: float = 0.0
    logs: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def find_vivado() -> str | None:
    override = os.environ.get(VIVADO_ENV)
    if override:
        found = shutil.which(override)
        if not found:
            raise ToolMissing(f"{VIVADO_ENV}={override} names no executable; fix or unset {VIVADO_ENV}")
        return found
    return shutil.which("vivado")


def write_project(params: EngineParams, spec: PcieBoard, folder: Path, *, jobs: int = 8,
                  allow_timing_fail: bool = False) -> dict[str, str]:
    """Writes the Verilog top, the blackboxes, the XDC and build.tcl into `folder`; returns the IP configuration."""
    from amaranth.back import verilog

    from fpga.cores.pcie_card_top import CardTop

    folder.mkdir(parents=True, exist_ok=True)
    config = ip_config(params, spec)
    (folder / FILES.verilog).write_text(verilog.convert(CardTop(params, spec), name=FILES.top))
    (folder / BLACKBOXES).write_text(blackbox_verilog(spec.pcie_lanes))
    (folder / FILES.xdc).write_text(xdc(spec))
    (folder / BUILD_TCL).write_text(project_tcl(spec, FILES, config, jobs=jobs, allow_timing_fail=allow_timing_fail))
    return config


def check_project(params: EngineParams, spec: PcieBoard, folder: Path, config: dict[str, str], *,
                  synthesize: bool) -> list[str]:
    """The checks of fpga/flow/vivado_checks.py and vivado_ip.py on what write_project wrote."""
    tcl = (folder / BUILD_TCL).read_text()
    vivado_checks.check_tcl_balanced(tcl, BUILD_TCL)
    inputs = vivado_checks.check_tcl_inputs(tcl, folder, BUILD_TCL)
    if f"-part {spec.part}" not in tcl:
        raise vivado_checks.ProjectCheckFailed(f"{BUILD_TCL} does not create the project for {spec.part}")
    checks = [f"{BUILD_TCL}: brackets, braces and quotes balance; it reads {', '.join(inputs)}, all written; "
              f"part {spec.part}"]
    checks += check_ip_config(config, params, spec)
    ports = vivado_checks.verilog_ports((folder / FILES.verilog).read_text(), FILES.top)
    checks += vivado_checks.check_ports_constrained(ports, (folder / FILES.xdc).read_text())
    if synthesize:
        checks.append(vivado_checks.synthesize(folder, [BLACKBOXES, FILES.verilog], FILES.top,
                                               folder / "yosys.log"))
    return checks


def run_vivado(vivado: str, tcl: str, folder: Path, log: Path, steps: tuple[str, ...], timeout_s: float,
               console: Console | None = None) -> None:
    """Runs `vivado -mode batch -source tcl` in `folder`, its output to `log`, a progress line per STEP marker;
    raises ToolFailed on an error exit or past `timeout_s` (then the whole Vivado process group is ended)."""
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=console or Console(stderr=True))
    command = [vivado, "-mode", "batch", "-nojournal", "-nolog", "-notrace", "-source", tcl]
    with log.open("w") as out, progress:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        proc = subprocess.Popen(command, cwd=folder, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        task = progress.add_task(f"vivado: starting (log: {log})", total=len(steps))
        deadline, seen, offset, partial = time.monotonic() + timeout_s, 0, 0, ""
        while proc.poll() is None:
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
                raise ToolFailed("vivado", f"ran past its limit of {timeout_s:.0f} s (raise it with --timeout)",
                                 log, _tail(log))
            with log.open(errors="replace") as f:  # only what was added since the last look: logs grow large
                f.seek(offset)
                text = partial + f.read()
                offset = f.tell()
            *lines, partial = text.split("\n")
            for line in lines:
                if line.startswith(STEP) and len(line.split()) > 1:
                    seen += 1
                    progress.update(task, completed=seen, description=f"vivado: {line.split()[1]} (log: {log})")
            time.sleep(0.5)
    if proc.returncode != 0:
        raise ToolFailed("vivado", f"exited with status {proc.returncode}", log, _tail(log))
    marks = [line.split()[1] for line in log.read_text(errors="replace").splitlines() if line.startswith(STEP)]
    if "done" not in marks:
        raise ToolFailed("vivado", "exited without finishing the script", log, _tail(log))


def _tail(log: Path, lines: int = 20) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def build(params: EngineParams, board_name: str, folder: Path, *, dry_run: bool = False,
          allow_timing_fail: bool = False, jobs: int = 8, timeout_s: float = 4 * 3600.0,
          console: Console | None = None) -> VivadoBuild:
    """Writes and checks the project; runs Vivado on it unless `dry_run` or Vivado is absent (then the generic
    synthesis stands in for it, and the result's `vivado` is None)."""
    spec = pcie_board(board_name)
    start = time.monotonic()
    vivado = None if dry_run else find_vivado()
    config = write_project(params, spec, folder, jobs=jobs, allow_timing_fail=allow_timing_fail)
    checks = check_project(params, spec, folder, config, synthesize=vivado is None)
    result = VivadoBuild(board=spec.name, folder=str(folder), vivado=vivado, checks=checks,
                         logs={"yosys": str(folder / "yosys.log")} if vivado is None else {})
    if vivado:
        log = folder / "vivado.log"
        run_vivado(vivado, BUILD_TCL, folder, log, BUILD_STEPS, timeout_s, console)
        for product in (FILES.bitstream, FILES.flash_image):
            if not (folder / product).is_file():
                raise FpgaFlowError(f"Vivado finished but wrote no {product} in {folder} (see {log})")
        result.bitstream, result.flash_image = str(folder / FILES.bitstream), str(folder / FILES.flash_image)
        result.logs = {"vivado": str(log), "timing": str(folder / FILES.timing_report),
                       "utilization": str(folder / FILES.utilization_report)}
    result.seconds = round(time.monotonic() - start, 1)
    return result


def _hw_server(url: str) -> str:
    host, _, port = url.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c in host for c in " {}[]\"\\$;"):
        raise FpgaFlowError(f"--hw-server wants HOST:PORT (e.g. localhost:3121), not {url!r}")
    return url


def flash(board_name: str, image: Path, *, to_flash: bool = False, hw_server: str = "localhost:3121",
          timeout_s: float = 1800.0, console: Console | None = None) -> Path:
    """Loads `image` into the board: a .bit into the FPGA (until power-off), or with `to_flash` a .mcs into its
    configuration flash (a .bit given with `to_flash` means the .mcs the build wrote beside it). Writes flash.tcl
    beside the image first, so it can be run by hand where Vivado is; returns Vivado's log."""
    spec = pcie_board(board_name)
    if to_flash and image.suffix == ".bit":
        image = image.with_suffix(".mcs")
    wanted = ".mcs" if to_flash else ".bit"
    if image.suffix != wanted:
        raise FpgaFlowError(f"{image} is not a {wanted} file: the {'flash' if to_flash else 'FPGA'} takes a "
                            f"{wanted} ({'pass --to-flash for a .mcs' if image.suffix == '.mcs' else 'see --help'})")
    if not image.is_file():
        raise FpgaFlowError(f"no {wanted} at {image}: run `arkdma fpga build --board {spec.name}` first "
                            "(it writes arkdma.bit and arkdma.mcs)")
    tcl = image.parent / FLASH_TCL
    tcl.write_text(flash_tcl(spec, str(image.resolve()), to_flash=to_flash, hw_server=_hw_server(hw_server)))
    vivado_checks.check_tcl_balanced(tcl.read_text(), FLASH_TCL)
    vivado = find_vivado()
    if vivado is None:
        raise ToolMissing(f"Vivado was not found on PATH, so nothing was loaded: {INSTALL_VIVADO}. The script is "
                          f"written: run `vivado -mode batch -source {tcl}` on a machine with Vivado and the "
                          "board's JTAG cable")
    log = image.parent / "flash.log"
    steps = ("connect", "cfgmem" if to_flash else "program", "done")
    run_vivado(vivado, FLASH_TCL, image.parent, log, steps, timeout_s, console)
    return log


__all__ = ["USER_CLOCK_MHZ", "VivadoBuild", "build", "flash", "find_vivado", "write_project", "check_project"]
