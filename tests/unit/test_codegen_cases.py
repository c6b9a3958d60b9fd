"""Ops that do the same thing share one `case` of the generated kernel, their tensors read from the OP_IO
table: a repeated layer is compiled once. Past the table's size, every op keeps its own case."""

from __future__ import annotations

import re

from ark_runtime import models
from ark_runtime.kernel import codegen
from ark_runtime.kernel.codegen import generate
from ark_runtime.model import Model
from ark_runtime.plan import build_plan
from ark_runtime.scheduler import DeviceSpec


def _source(m: Model, sms: int = 8) -> str:
    return generate(m, build_plan(m, DeviceSpec(num_sms=sms))).text


def _io_table(text: str) -> list[list[int]]:
    body = re.search(r"OP_IO\[\d+\]\[\d+\] = \{(.*)\};", text).group(1)
    return [[int(v) for v in row.split(",")] for row in re.findall(r"\{([^{}]*)\}", body)]


def test_a_chain_of_the_same_op_is_one_case_with_each_ops_tensors_in_the_table():
    m = models.dependent_tasks(50)
    source = generate(m, build_plan(m, DeviceSpec(num_sms=8)))
    text = source.text
    # one case, switched on by the run instruction's case (no jump table over 50 op ids), every op listed above it
    assert text.count("unary_tile") == 1 and text.count("    case ") == 1 and "switch (body)" in text
    assert source.op_cases == (0,) * 50 and all(f"    // op {op.id}: unary neg(" in text for op in m.ops)
    table = _io_table(text)
    assert table == [[op.inputs[0], op.output] for op in m.ops]
    # the waits load the next tile's row of the table ahead
    assert "void prefetch_op(int op)" in text and '"r"(OP_IO[op][0]), "r"(OP_IO[op][1])' in text


def test_the_same_fused_chain_on_other_tensors_shares_its_struct_and_its_case():
    from ark_runtime.fusion import fuse

    m = Model("two")
    x, y = m.input("x", (64, 128), "fp32"), m.input("y", (64, 128), "fp32")
    m.output(m.gelu(m.silu(x)))
    m.output(m.gelu(m.silu(y)))
    m.output(m.unary("relu", m.unary("exp", y)))  # another chain: its own struct and case
    fused = fuse(m)
    assert [op.kind for op in fused.ops] == ["fused"] * 3
    text = _source(fused)
    assert len(set(re.findall(r"struct (Fused_\w+) ", text))) == 2
    assert text.count("ark::map_tile(") == 2 and text.count("    case ") == 2


def test_past_the_table_size_every_op_has_its_own_case_with_literal_ids(monkeypatch):
    monkeypatch.setattr(codegen, "MAX_IO_TABLE", 10)
    m = models.dependent_tasks(20)
    text = _source(m)
    source = generate(m, build_plan(m, DeviceSpec(num_sms=8)))
    assert text == source.text and source.op_cases == tuple(range(20))  # each op its own case
    assert "OP_IO" not in text and "io[" not in text and "void prefetch_op(int) {}" in text
    assert text.count("unary_tile") == 20
    assert "(const float*)T[7], (float*)T[8]" in text
