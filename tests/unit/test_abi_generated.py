"""The files generated from driver/abi.py: up to date, consistent with the Python records, valid C and C++."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from driver import abi, abi_codegen
from driver.dtypes import DESCRIPTOR_DTYPE

REPO = Path(__file__).resolve().parents[2]


def test_generated_files_are_up_to_date():
    stale = abi_codegen.stale_files()
    assert not stale, f"regenerate with `arkdma abi generate`: {stale}"


def test_a_changed_definition_makes_the_files_stale(tmp_path, monkeypatch):
    abi_codegen.write_all(tmp_path)
    assert abi_codegen.stale_files(tmp_path) == []
    monkeypatch.setattr(abi, "WINDOW_BASE", abi.WINDOW_BASE + 0x1000)
    header_mentions_window = "WINDOW_BASE" in abi_codegen.c_header()
    assert header_mentions_window
    assert abi_codegen.HEADER_PATH in abi_codegen.stale_files(tmp_path)


def test_a_hand_edit_is_detected(tmp_path):
    abi_codegen.write_all(tmp_path)
    header = tmp_path / abi_codegen.HEADER_PATH
    header.write_text(header.read_text().replace("#define", "#define  ", 1))
    assert abi_codegen.stale_files(tmp_path) == [abi_codegen.HEADER_PATH]
    assert abi_codegen.write_all(tmp_path) == [abi_codegen.HEADER_PATH]
    assert abi_codegen.stale_files(tmp_path) == []


def test_descriptor_dtype_matches_the_record():
    assert DESCRIPTOR_DTYPE.itemsize == abi.DESCRIPTOR_BYTES == 32
    for f in abi.DESCRIPTOR.fields:
        dt, offset = DESCRIPTOR_DTYPE.fields[f.name][:2]
        assert offset == f.offset and dt.itemsize * 8 == f.bits and dt.byteorder in "<="


def test_the_docs_table_lists_every_descriptor_field_and_error_code():
    text = abi_codegen.markdown()
    for f in abi.DESCRIPTOR.fields:
        assert f"`{f.name}`" in text
    for code in abi.ErrorCode:
        assert code.name in text


def test_bits_with_their_own_access_are_labelled_in_both_files():
    """A RW1C flag inside a read-only register (STATUS.ERRLOG_OVERFLOW) says so in the docs' table and the header."""
    special = [(blk, reg, b) for blk in abi.BLOCKS for reg in blk.registers for b in reg.bits if b.access]
    assert special, "STATUS.ERRLOG_OVERFLOW is RW1C"
    text, header = abi_codegen.markdown(), abi_codegen.c_header()
    for blk, reg, b in special:
        assert f"`{b.name}` | {b.access.value} | {b.doc}" in text
        define = f"ARKDMA_{blk.name.upper()}_{reg.name}_{b.name}_MASK {b.mask:#x}u  /* {b.access.value}: "
        assert define in header


def _compile(compiler: str, lang: str, source: str, tmp_path: Path) -> subprocess.CompletedProcess:
    src = tmp_path / f"check.{lang}"
    src.write_text(source)
    std = "-std=c11" if lang == "c" else "-std=c++17"
    return subprocess.run([compiler, std, "-Wall", "-Werror", "-I", str(REPO / "driver/include"), "-c", str(src),
                           "-o", str(tmp_path / "check.o")], capture_output=True, text=True)


def _layout_source() -> str:
    checks = [f'ARKDMA_STATIC_ASSERT(sizeof(arkdma_descriptor) == {abi.DESCRIPTOR_BYTES}, "size");']
    checks += [f'ARKDMA_STATIC_ASSERT(offsetof(arkdma_descriptor, {f.name}) == {f.offset}, "{f.name}");'
               for f in abi.DESCRIPTOR.fields]
    return "#include <stddef.h>\n#include <arkdma/abi.h>\n" + "\n".join(checks) + "\n"


@pytest.mark.parametrize(("compiler", "lang"), [("gcc", "c"), ("g++", "cpp")])
def test_header_compiles_and_matches_the_record_offsets(compiler, lang, tmp_path):
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed")
    result = _compile(compiler, lang, _layout_source(), tmp_path)
    assert result.returncode == 0, result.stderr


def test_a_wrong_offset_fails_to_compile(tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    wrong = _layout_source().replace("cookie) == 28", "cookie) == 24")
    assert wrong != _layout_source()
    assert _compile("gcc", "c", wrong, tmp_path).returncode != 0


def test_descriptor_array_bytes_equal_packed_descriptors():
    from driver.descriptor import Descriptor

    d = Descriptor(src_region=3, src_offset=0x1122334455, dst_region=4, dst_offset=7, length=4097,
                   flags=abi.Flag.NOTIFY | abi.Flag.FENCE, cookie=0xDEADBEEF)
    arr = np.zeros(1, DESCRIPTOR_DTYPE)
    for f in abi.DESCRIPTOR.fields:
        arr[f.name] = getattr(d, f.name)
    assert arr.tobytes() == d.pack()
    assert Descriptor.unpack(d.pack()) == d
