"""Argument types shared by the `arkdma` commands: byte sizes and positive counts, refused with an example."""

from __future__ import annotations

import argparse

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
