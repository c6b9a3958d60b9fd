"""Rules for the native sources that a compiler cannot check."""

from __future__ import annotations

import re
from pathlib import Path

NATIVE = Path(__file__).resolve().parents[2] / "host" / "native"


def test_no_iostreams_in_the_native_library():
    """Some GPU images' compilers link libstdc++ statically into the library; with the system's copy
    also in the process, iostream locale facets from the two mix and crash (seen on an H100 image)."""
    offenders = [
        f"{p.name}: {m.group(0)}"
        for p in sorted(NATIVE.glob("*.[ch]*"))
        for m in re.finditer(r"#include <(sstream|iostream|fstream|ostream|istream|iomanip|locale)>", p.read_text())
    ]
    assert not offenders, f"use snprintf/std::to_string instead of iostreams: {offenders}"
