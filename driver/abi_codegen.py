"""Generates the C/CUDA header and the Markdown tables from driver/abi.py, and finds stale copies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from driver import abi

REPO = Path(__file__).resolve().parent.parent
HEADER_PATH = "driver/include/arkdma/abi.h"
DOC_PATH = "docs/abi.md"
_C_TYPES = {8: "uint8_t", 16: "uint16_t", 32: "uint32_t", 64: "uint64_t"}
_BANNER = "Generated from driver/abi.py by `arkdma abi generate`. Do not edit by hand."


def _define(name: str, value: int, comment: str = "", decimal: bool = False) -> str:
    tail = f"  /* {comment} */" if comment else ""
    digits = str(value) if decimal else f"{value:#x}"
    literal = f"{digits}ULL" if value > 0xFFFFFFFF else f"{digits}u"
    return f"#define {name} {literal}{tail}"


def c_name(record: abi.Record) -> str:
    return f"arkdma_{record.name}"


def _enum_block(prefix: str, members, docs: dict | None = None) -> list[str]:
    lines = []
    for m in members:
        lines.append(_define(f"{prefix}_{m.name}", int(m), (docs or {}).get(m, ""), decimal=docs is not None))
    return lines


def c_header() -> str:
    out = [
        f"/* {_BANNER} */",
        "#ifndef ARKDMA_ABI_H",
        "#define ARKDMA_ABI_H",
        "",
        "#if defined(__CUDACC_RTC__)",
        "typedef unsigned char uint8_t;",
        "typedef unsigned short uint16_t;",
        "typedef unsigned int uint32_t;",
        "typedef unsigned long long uint64_t;",
        "#else",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "#endif",
        "",
        _define("ARKDMA_ABI_VERSION_MAJOR", abi.ABI_VERSION_MAJOR, decimal=True),
        _define("ARKDMA_ABI_VERSION_MINOR", abi.ABI_VERSION_MINOR, decimal=True),
        _define("ARKDMA_DEVICE_MAGIC", abi.DEVICE_MAGIC, "'ARKD'"),
        _define("ARKDMA_DESCRIPTOR_BYTES", abi.DESCRIPTOR_BYTES, decimal=True),
        _define("ARKDMA_COMPLETION_BYTES", abi.COMPLETION_BYTES, decimal=True),
        _define("ARKDMA_COMPLETION_ERROR_BIT", abi.COMPLETION_ERROR_BIT, decimal=True),
        _define("ARKDMA_COMPLETION_ERROR", 1 << abi.COMPLETION_ERROR_BIT, "sticky error flag"),
        _define("ARKDMA_COMPLETION_COUNT_MASK", abi.COMPLETION_COUNT_MASK),
        _define("ARKDMA_DOORBELL_BITS", abi.DOORBELL_BITS, decimal=True),
        _define("ARKDMA_IMM_BYTES", abi.IMM_BYTES, decimal=True),
        _define("ARKDMA_MAX_LENGTH", abi.MAX_LENGTH),
        _define("ARKDMA_WINDOW_BASE", abi.WINDOW_BASE),
        "",
        "/* descriptor flags */",
        *_enum_block("ARKDMA_FLAG", abi.Flag),
        _define("ARKDMA_FLAGS_VALID", abi.FLAGS_VALID),
        "",
        "/* region permissions */",
        *_enum_block("ARKDMA_PERM", abi.Perm),
        "",
        "/* capability bits (CAPS register) */",
        *_enum_block("ARKDMA_CAP", abi.Capability),
        "",
        "/* error codes, in the order engines check them */",
        *_enum_block("ARKDMA_ERR", abi.ErrorCode, abi.ERROR_DOCS),
        "",
    ]
    for block in abi.BLOCKS:
        name = block.name.upper()
        out.append(f"/* {block.doc} */")
        out.append(_define(f"ARKDMA_{name}_BASE", block.base))
        if block.stride:
            out.append(_define(f"ARKDMA_{name}_STRIDE", block.stride))
        for reg in block.registers:
            out.append(_define(f"ARKDMA_{name}_{reg.name}", reg.offset, f"{reg.access}: {reg.doc}"))
            for b in reg.bits:
                out.append(_define(f"ARKDMA_{name}_{reg.name}_{b.name}_LSB", b.lsb))
                out.append(_define(f"ARKDMA_{name}_{reg.name}_{b.name}_MASK", b.mask,
                                   f"{b.access.value}: {b.doc}" if b.access else ""))
        out.append("")
    out += [
        "/* what a device-API call returns (device.cuh), and the status record's code */",
        *_enum_block("ARKDMA_DEV", abi.DeviceCode, abi.DEVICE_CODE_DOCS),
        "/* where a device-API failure was met (the status record's site) */",
        *_enum_block("ARKDMA_DEV_SITE", [s for s in abi.Site if s is not abi.Site.NONE], abi.SITE_DOCS),
        "",
    ]
    records = (abi.DESCRIPTOR, *abi.DEVICE_RECORDS)
    for rec in records:
        out += [f"/* {rec.doc} */", f"typedef struct {c_name(rec)} {{"]
        for f in rec.fields:
            out.append(f"  {f.ctype or _C_TYPES[f.bits]} {f.name};  /* +{f.offset}: {f.doc} */")
        out += [f"}} {c_name(rec)};", ""]
    out += [
        "#if defined(__cplusplus)",
        "#define ARKDMA_STATIC_ASSERT(c, m) static_assert(c, m)",
        "#else",
        "#define ARKDMA_STATIC_ASSERT(c, m) _Static_assert(c, m)",
        "#endif",
    ]
    for rec in records:
        cn = c_name(rec)
        out.append(f'ARKDMA_STATIC_ASSERT(sizeof({cn}) == {rec.size}, "{cn} must be {rec.size} bytes");')
        for f in rec.fields:
            out.append(f'ARKDMA_STATIC_ASSERT(sizeof((({cn}*)0)->{f.name}) == {f.bits // 8}, '
                       f'"{cn}.{f.name} is {f.bits // 8} bytes");')
    out.append("#if !defined(__CUDACC_RTC__) /* NVRTC has no offsetof */")
    for rec in records:
        cn = c_name(rec)
        for f in rec.fields:
            out.append(f'ARKDMA_STATIC_ASSERT(offsetof({cn}, {f.name}) == {f.offset}, "{cn}.{f.name} at +{f.offset}");')
    out += ["#endif", "", "#endif /* ARKDMA_ABI_H */", ""]
    return "\n".join(out)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    def row(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    lines = [row(header), "|" + "|".join("---" for _ in header) + "|"]
    lines += [row(r) for r in rows]
    return lines + [""]


def markdown() -> str:
    d = abi.DESCRIPTOR
    out = [
        "# arkdma ABI tables",
        "",
        f"<!-- {_BANNER} -->",
        "",
        f"ABI version {abi.ABI_VERSION_MAJOR}.{abi.ABI_VERSION_MINOR}. All values little-endian. "
        "The rules that go with these tables are in [abi-rules.md](abi-rules.md).",
        "",
        f"## Descriptor ({d.size} bytes)",
        "",
        d.doc,
        "",
        *_table(
            ["offset", "bits", "field", "meaning"],
            [[f"+{f.offset}", str(f.bits), f"`{f.name}`", f.doc] for f in d.fields],
        ),
        "## Flags",
        "",
        *_table(["bit", "flag"], [[f"{int(m):#x}", m.name] for m in abi.Flag]),
        "## Completion word",
        "",
        abi.COMPLETION_DOC,
        "",
        "## Error codes",
        "",
        *_table(
            ["code", "name", "meaning"],
            [[str(int(c)), f"`{c.name}`", abi.ERROR_DOCS[c]] for c in abi.ErrorCode],
        ),
        "## Region permissions",
        "",
        *_table(["bit", "permission"], [[f"{int(m):#x}", m.name] for m in abi.Perm]),
        "## Capabilities (CAPS)",
        "",
        *_table(["bit", "capability"], [[f"{int(m):#x}", m.name] for m in abi.Capability]),
        "## Device API records (device.cuh)",
        "",
        "What a GPU kernel gets from the host to post into a queue: the queue handle by value, the producer "
        "state in GPU memory and the status record in mapped host memory. Pointers are 64-bit.",
        "",
    ]
    for rec in abi.DEVICE_RECORDS:
        out += [f"### `{c_name(rec)}` ({rec.size} bytes)", "", rec.doc, "",
                *_table(["offset", "bits", "field", "meaning"],
                        [[f"+{f.offset}", f.ctype or str(f.bits), f"`{f.name}`", f.doc] for f in rec.fields])]
    out += [
        "### Device codes (`ARKDMA_DEV_*`) and sites (`ARKDMA_DEV_SITE_*`)",
        "",
        *_table(["code", "name", "meaning"],
                [[str(int(c)), f"`{c.name}`", abi.DEVICE_CODE_DOCS[c]] for c in abi.DeviceCode]),
        *_table(["site", "name", "meaning"], [[str(int(s)), f"`{s.name}`", abi.SITE_DOCS[s]] for s in abi.Site]),
        "## Registers",
        "",
        f"32-bit registers in the BAR. Submission windows start at WINDOW_BASE ({abi.WINDOW_BASE:#x}); "
        "queue q's window is at WINDOW_BASE + q * WINDOW_STRIDE, slot i at + (i mod SLOTS) * 32.",
        "",
    ]
    for block in abi.BLOCKS:
        where = f"{block.base:#06x}"
        if block.stride:
            where += f" + n * {block.stride:#x}"
        out += [f"### {block.name} block at {where}", "", block.doc, ""]
        rows = []
        for reg in block.registers:
            rows.append([f"{reg.offset:#05x}", f"`{reg.name}`", reg.access.value, reg.doc])
            for b in reg.bits:
                span = f"{b.lsb}" if b.width == 1 else f"{b.lsb + b.width - 1}:{b.lsb}"
                rows.append(["", f"&nbsp;&nbsp;[{span}] `{b.name}`", b.access.value if b.access else "", b.doc])
        out += _table(["offset", "register", "access", "meaning"], rows)
    return "\n".join(out)


GENERATED: dict[str, Callable[[], str]] = {HEADER_PATH: c_header, DOC_PATH: markdown}


def stale_files(root: Path = REPO) -> list[str]:
    """Generated files whose content differs from what driver/abi.py gives now."""
    stale = []
    for rel, make in GENERATED.items():
        path = root / rel
        if not path.exists() or path.read_text() != make():
            stale.append(rel)
    return stale


def write_all(root: Path = REPO) -> list[str]:
    """Write every generated file; return the ones that changed."""
    changed = []
    for rel, make in GENERATED.items():
        path = root / rel
        text = make()
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(rel)
    return changed
