"""The ctypes binding (host/native.py) against the C API's header (host/native/arkdma_engine.h): every
function, its parameter names and C types, its result, and every struct field, so a change on one side
that the other does not follow fails here instead of corrupting memory at a call."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

from host import native

HEADER = Path(native.__file__).parent / "native" / "arkdma_engine.h"
STRUCTS = {"arkdma_sw_config": native.Config, "arkdma_sw_queue_info": native.QueueInfo,
           "arkdma_sw_errlog_entry": native.ErrlogEntry}
SCALARS = {"uint32_t": ctypes.c_uint32, "uint64_t": ctypes.c_uint64, "int32_t": ctypes.c_int32,
           "int64_t": ctypes.c_int64, "int": ctypes.c_int, "double": ctypes.c_double}


def _ctype(decl: str):
    """The ctypes type the binding must use for a C type as the header spells it."""
    decl = decl.replace("const ", "").strip()
    stars = decl.count("*")
    base = decl.replace("*", "").strip()
    if base == "arkdma_sw_engine":
        return ctypes.c_void_p if stars == 1 else ctypes.POINTER(ctypes.c_void_p)
    if stars == 0:
        return None if base == "void" else SCALARS[base]
    assert stars == 1, decl
    if base == "char":
        return ctypes.c_char_p
    if base == "void":
        return ctypes.c_void_p
    return ctypes.POINTER(STRUCTS.get(base) or SCALARS[base])


def _split(decl: str) -> tuple[str, str]:
    m = re.fullmatch(r"(.*?)(\w+)", decl.strip())
    return m.group(1).strip(), m.group(2)


def header_functions() -> dict[str, tuple[object, list[tuple[str, object]]]]:
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    out = {}
    for result, name, params in re.findall(r"^([\w ]+\**)\s*(arkdma_sw_\w+)\(([^)]*)\);", text, flags=re.M):
        plist = [] if params.strip() == "void" else [_split(p) for p in params.split(",")]
        out[name] = (_ctype(result), [(pname, _ctype(ptype)) for ptype, pname in plist])
    return out


def header_structs() -> dict[str, list[tuple[str, object]]]:
    text = HEADER.read_text()
    out = {}
    for body, name in re.findall(r"typedef struct \w+ \{(.*?)\} (\w+);", text, flags=re.S):
        fields = [_split(line.rstrip(";")) for line in body.strip().splitlines()]
        out[name] = [(fname, _ctype(ftype)) for ftype, fname in fields]
    return out


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if hasattr(a, "_type_") and hasattr(b, "_type_") and issubclass(a, ctypes._Pointer) and issubclass(b, ctypes._Pointer):
        return _same(a._type_, b._type_)
    return a is b


def test_every_function_matches_the_header():
    declared = header_functions()
    assert set(declared) == set(native._SIGNATURES), "functions in one and not the other"
    for name, (result, params) in declared.items():
        bound_result, bound_params = native._SIGNATURES[name]
        assert _same(result, bound_result), f"{name}: result {result} in the header, {bound_result} bound"
        assert [p for p, _ in params] == [p for p, _ in bound_params], f"{name}: parameter names differ"
        for (pname, ctype), (_, bound) in zip(params, bound_params):
            assert _same(ctype, bound), f"{name}({pname}): {ctype} in the header, {bound} bound"


def test_every_struct_matches_the_header():
    declared = header_structs()
    assert set(declared) == set(STRUCTS)
    for cname, fields in declared.items():
        bound = STRUCTS[cname]._fields_
        assert [f for f, _ in fields] == [f for f, _ in bound], f"{cname}: field names differ"
        for (fname, ctype), (_, b) in zip(fields, bound):
            assert _same(ctype, b), f"{cname}.{fname}: {ctype} in the header, {b} bound"


def test_the_check_sees_a_changed_parameter(monkeypatch):
    wrong = dict(native._SIGNATURES)
    result, params = wrong["arkdma_sw_ring"]
    wrong["arkdma_sw_ring"] = (result, [(n, ctypes.c_uint64 if n == "doorbell" else t) for n, t in params])
    monkeypatch.setattr(native, "_SIGNATURES", wrong)
    try:
        test_every_function_matches_the_header()
    except AssertionError as exc:
        assert "arkdma_sw_ring(doorbell)" in str(exc)
    else:
        raise AssertionError("a parameter bound as uint64 against a uint32 in the header passed the check")
