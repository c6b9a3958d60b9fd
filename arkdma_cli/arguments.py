"""Argument types shared by the `arkdma` commands: each refuses a bad value before any work starts, with
what was wrong and an example of what is wanted."""

from __future__ import annotations

import argparse
import math
import os
import re
from pathlib import Path

GIB = 1 << 30


def byte_sizes(text: str) -> tuple[int, ...]:
    """Comma-separated sizes in bytes, each 1 byte .. 1 GiB (e.g. "64,4096,1048576")."""
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        sizes = ()
    if not sizes or any(not 0 < s <= GIB for s in sizes):
        raise argparse.ArgumentTypeError(
            f"want sizes in bytes (1 .. 1 GiB) separated by commas, like 64,4096; not {text!r}")
    return sizes


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"want a positive integer, not {text!r}")
    return value


def output_file(text: str) -> Path:
    """A file the command will write: refused now, before any work, when it is a directory or cannot be
    created (the nearest existing folder above it is not a writable folder)."""
    path = Path(text)
    if not text.strip() or text.endswith(("/", os.sep)) or path.is_dir():
        example = f"{text.rstrip('/') or 'out'}/result.json"
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file: give a file name such as {example}")
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: no permission to write in {parent}")
    return path


def output_dir(text: str) -> Path:
    """A folder the command will write files into (made when needed): refused now when it is a file or
    cannot be made."""
    path = Path(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("want a folder name, like findings/")
    parent = path
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write into {text!r}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write into {text!r}: no permission to write in {parent}")
    return path


def engine_name(text: str) -> str:
    from ark_runtime import engines

    if text not in engines.known():
        raise argparse.ArgumentTypeError(f"unknown engine {text!r}; known engines: {', '.join(engines.known())}")
    return text


def input_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not a readable file" if path.exists() else f"{text!r} does not exist")
    return path


def bounded_float(low: float, high: float, what: str):
    """A finite number in (low, high]; the returned function is an argparse type."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or not low < value <= high:
            raise argparse.ArgumentTypeError(f"want {what} above {low:g} and at most {high:g}, not {text!r}")
        return value

    parse.__name__ = what  # argparse names the type in its messages
    return parse


def bounded_int(low: int, high: int, what: str):
    """An integer in [low, high], decimal or 0x-hex; the returned function is an argparse type."""

    def parse(text: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"want {what} in {low:#x}..{high:#x} (decimal or 0x hex), not {text!r}")
        return value

    parse.__name__ = what
    return parse


def verilog_identifier(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]{0,127}", text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Verilog module name: letters, digits, _ and $, not starting with a digit")
    return text


seconds = bounded_float(0.0, 7 * 24 * 3600.0, "a time in seconds")
clock_mhz = bounded_float(0.0, 2000.0, "a clock in MHz")
nanoseconds = bounded_float(0.0, 1e6, "a time in ns")
