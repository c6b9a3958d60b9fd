"""Checks of a generated Vivado project that need no Vivado: the Tcl's brackets, braces and quotes balance and
it reads only files that were written; every top-level port of the Verilog is placed by the XDC and the XDC places
nothing else (and no pin twice); the Verilog synthesizes with yosys, the IP and the primitives as blackboxes."""

from __future__ import annotations

import re
import time
from pathlib import Path

from fpga.errors import FpgaFlowError
from fpga.flow import toolchain


class ProjectCheckFailed(FpgaFlowError):
    """A generated project file is wrong; the message says which file, where and what."""


def check_tcl_balanced(text: str, name: str = "Tcl") -> None:
    """Brackets, braces and double quotes nest as Tcl reads them (backslash escapes, quotes only at a word's
    start, brackets literal inside braces, comments at a command's start); raises at the first mismatch."""
    stack: list[tuple[str, int]] = []
    line, i, n = 1, 0, len(text)
    command_start, word_start = True, True
    while i < n:
        c = text[i]
        top = stack[-1][0] if stack else None
        if c == "\\":
            if i + 1 < n and text[i + 1] == "\n":
                line += 1
            i += 2
            command_start = word_start = False
            continue
        if c == "\n":
            line += 1
        if top in (None, "[") and command_start and c == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if top == "{":
            if c == "{":
                stack.append(("{", line))
            elif c == "}":
                stack.pop()
        elif top == '"':
            if c == '"':
                stack.pop()
            elif c == "[":
                stack.append(("[", line))
        else:
            if c == "{" and word_start:
                stack.append(("{", line))
            elif c == '"' and word_start:
                stack.append(('"', line))
            elif c == "[":
                stack.append(("[", line))
            elif c == "]":
                if top != "[":
                    raise ProjectCheckFailed(f"{name} line {line}: ']' closes nothing")
                stack.pop()
            elif c == "}":
                raise ProjectCheckFailed(f"{name} line {line}: '}}' closes nothing")
        if top in (None, "["):
            command_start = c in "\n;[" or (command_start and c in " \t")
            word_start = c in " \t\n;[{"
        else:
            command_start, word_start = False, c in " \t\n{"
        i += 1
    if stack:
        kind, opened = stack[-1]
        raise ProjectCheckFailed(f"{name}: {kind!r} opened on line {opened} is never closed")


INPUT_COMMANDS = ("add_files", "read_verilog", "read_xdc", "source", "import_files", "read_ip")


def check_tcl_inputs(text: str, folder: Path, name: str = "Tcl") -> list[str]:
    """Every file an input command names (as [file join $origin NAME]) exists in `folder`; returns their names."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0] not in INPUT_COMMANDS:
            continue
        names = re.findall(r"\[file join \$origin ([^\]\s]+)\]", line)
        if not names:
            raise ProjectCheckFailed(f"{name} line {number}: {words[0]} reads a file outside the build folder: "
                                     f"{line.strip()}")
        for file in names:
            if not (folder / file).is_file():
                raise ProjectCheckFailed(f"{name} line {number}: {words[0]} reads {file}, which was not written")
            found.append(file)
    return found


def verilog_ports(verilog: str, top: str) -> dict[str, tuple[str, int]]:
    """The top module's ports: name -> (direction, width), from Amaranth's Verilog."""
    head = re.search(rf"^module {re.escape(top)}\((.*?)\);(.*?)^endmodule", verilog, re.M | re.S)
    if not head:
        raise ProjectCheckFailed(f"the Verilog has no module {top}")
    ports = {}
    for direction, msb, lsb, port in re.findall(r"^\s*(input|output|inout)\s+(?:\[(\d+):(\d+)\]\s+)?(\S+);",
                                                head.group(2), re.M):
        ports[port] = (direction, int(msb) - int(lsb) + 1 if msb else 1)
    listed = {p.strip() for p in head.group(1).split(",")}
    if listed != set(ports):
        raise ProjectCheckFailed(f"module {top} lists ports {sorted(listed)} but declares {sorted(ports)}")
    return ports


def xdc_placements(xdc: str) -> dict[tuple[str, int | None], str]:
    """(port, bit or None) -> package pin, for every set_property that gives a PACKAGE_PIN."""
    placed: dict[tuple[str, int | None], str] = {}
    for number, line in enumerate(xdc.splitlines(), 1):
        pin = re.search(r"PACKAGE_PIN\s+(\w+)", line)
        if not line.startswith("set_property") or not pin:
            continue
        target = re.search(r"\[get_ports\s+(?:\{([^}]+)\}|(\S+?))\]", line)
        if not target:
            raise ProjectCheckFailed(f"XDC line {number}: a PACKAGE_PIN on no port: {line}")
        ref = (target.group(1) or target.group(2)).strip()
        bit = re.fullmatch(r"(\w+)\[(\d+)\]", ref)
        key = (bit.group(1), int(bit.group(2))) if bit else (ref, None)
        if key in placed:
            raise ProjectCheckFailed(f"XDC line {number}: {ref} is placed twice")
        placed[key] = pin.group(1)
    return placed


def check_ports_constrained(ports: dict[str, tuple[str, int]], xdc: str) -> list[str]:
    """Every bit of every top-level port has a pin, the XDC places no port the top lacks, no pin is used twice,
    and every clock is created on a port of the top."""
    placed = xdc_placements(xdc)
    for port, (_, width) in ports.items():
        bits = [None] if width == 1 else list(range(width))
        missing = [b for b in bits if (port, b) not in placed]
        if missing:
            where = port if missing == [None] else f"{port}[{', '.join(map(str, missing))}]"
            raise ProjectCheckFailed(f"top-level port {where} has no PACKAGE_PIN in the XDC")
    for (port, bit) in placed:
        if port not in ports:
            raise ProjectCheckFailed(f"the XDC places {port}, which is not a port of the top "
                                     f"(ports: {', '.join(sorted(ports))})")
        width = ports[port][1]
        if (bit is None) != (width == 1) or (bit is not None and bit >= width):
            raise ProjectCheckFailed(f"the XDC places {port}{'' if bit is None else f'[{bit}]'}, but {port} is "
                                     f"{width} bit{'s' if width > 1 else ''} wide")
    pins: dict[str, tuple] = {}
    for key, pin in placed.items():
        if pin in pins:
            raise ProjectCheckFailed(f"pin {pin} is given to both {pins[pin]} and {key}")
        pins[pin] = key
    for clock in re.findall(r"create_clock .*\[get_ports (\S+?)\]", xdc):
        if clock not in ports:
            raise ProjectCheckFailed(f"the XDC creates a clock on {clock}, which is not a port of the top")
    return [f"{len(ports)} top-level ports ({sum(w for _, w in ports.values())} bits) each placed on its own pin "
            f"by the XDC, and nothing else placed"]


def synthesize(folder: Path, sources: list[str], top: str, log: Path, timeout_s: float = 1800.0) -> str:
    """Generic yosys synthesis (coarse: elaboration, optimization, memory inference, no technology mapping) of
    `sources`; `hierarchy -check` fails on an instance of a module or port that no source declares."""
    yosys = toolchain.find("yosys")
    script = "; ".join([*(f"read_verilog -sv {s}" for s in sources), f"hierarchy -check -top {top}",
                        f"synth -top {top} -run begin:fine", "check -assert", "tee -o yosys_stat.txt stat"])
    start = time.monotonic()
    yosys.run(["-q", "-p", script], log, folder, timeout_s)
    return f"yosys synthesized {top} with the IP and primitives as blackboxes in {time.monotonic() - start:.0f} s"
