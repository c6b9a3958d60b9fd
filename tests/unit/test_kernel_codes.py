"""The codes the host and the loop kernel share are declared once (ark_runtime/kernel/codes.py): the checked-in
header is what the declaration makes, every kernel includes it, and the host's names come from the same enums."""

from __future__ import annotations

import pytest

from ark_runtime.kernel import codes
from ark_runtime.kernel.codegen import INCLUDE_DIR, generate
from ark_runtime.kernel.program import INS_RUN, INS_SIGNAL, INS_WAIT
from ark_runtime.models import named
from ark_runtime.plan import build_plan
from ark_runtime.scheduler import DeviceSpec


def test_the_checked_in_header_is_current():
    assert not codes.stale(), "include/ark/codes.h is stale: run python -m ark_runtime.kernel.codes"


def test_a_changed_declaration_makes_the_header_stale(monkeypatch):
    monkeypatch.setitem(codes.CONSTANTS, "RING", codes.RING * 2)
    assert codes.stale()


def test_the_header_holds_every_code():
    text = codes.header()
    for c in codes.Ins:
        assert f"INS_{c.name} = {c.value}" in text
    for c in codes.Fault:
        assert f"FAULT_{c.name} = {c.value}" in text
    for name, value in codes.CONSTANTS.items():
        assert f"constexpr int {name} = {value};" in text


def test_the_program_builder_uses_the_declared_instructions():
    assert (INS_RUN, INS_SIGNAL, INS_WAIT) == (codes.Ins.RUN, codes.Ins.SIGNAL, codes.Ins.WAIT)


def test_every_fault_but_none_has_a_name():
    assert set(codes.FAULT_NAMES) == set(codes.Fault) - {codes.Fault.NONE}


def test_no_other_header_declares_the_codes_again():
    for path in (INCLUDE_DIR / "ark").glob("*.cuh"):
        text = path.read_text()
        for decl in ("enum Ins", "enum FaultCode", "constexpr int RING =", "constexpr int GRAPH_POOL ="):
            assert decl not in text, f"{path.name} declares {decl!r}: it belongs in codes.py"


@pytest.mark.parametrize("name", ["chain64", "copy8k"])
def test_every_kernel_includes_the_codes_and_the_loop_from_their_files(name):
    m = named(name)
    text = generate(m, build_plan(m, DeviceSpec(num_sms=8))).text
    assert "#include <ark/loop.cuh>" in text and text.rstrip().endswith("#include <ark/loop_kernel.cuh>")
    assert '#include "codes.h"' in (INCLUDE_DIR / "ark" / "loop.cuh").read_text()
