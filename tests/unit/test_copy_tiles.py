"""A copy op's tiles: one DMA tile for an engine, or, moved by the SMs, contiguous byte ranges spread over
the SMs that together cover the tensor once, each waiting only for the part of its input it copies."""

from __future__ import annotations

import pytest

from ark_runtime import models
from ark_runtime.kernel.codegen import generate
from ark_runtime.model import DTYPE_BYTES, Model
from ark_runtime.plan import build_plan
from ark_runtime.scheduler import DeviceSpec


def _copy_tiles(plan, op):
    return [t for t in plan.tiles if t["op"] == op]


def test_a_dma_copy_is_one_tile_that_posts_a_descriptor():
    m = models.named("copy1m")
    plan = build_plan(m, DeviceSpec(num_sms=132))
    (tile,) = _copy_tiles(plan, 1)
    assert tile["dma"] and tile["writes"][1:] == [0, 1, 0, (1 << 20) // 4]


@pytest.mark.parametrize("shape", [((1 << 20) // 4,), (512, 512), (3, 1001), (1,)])
def test_sm_copy_tiles_are_contiguous_byte_ranges_covering_the_tensor_once(shape):
    m = Model("c")
    x = m.input("x", shape, "fp32")
    m.output(m.copy(m.unary("identity", x), "host"))
    out = m.tensors[m.ops[1].output]
    plan = build_plan(m, DeviceSpec(num_sms=132), sm_copies=frozenset({1}))
    tiles = _copy_tiles(plan, 1)
    ranges = []
    for t in tiles:
        _, r0, r1, c0, c1 = t["writes"]
        assert not t["dma"]
        assert r1 - r0 == 1 or (c0, c1) == (0, out.cols), "a tile must be one byte range"
        ranges.append(((r0 * out.cols + c0), (r0 * out.cols + c0) + (r1 - r0) * (c1 - c0)))
        assert t["reads"] == [[x.id + 1, r0, r1, c0, c1]]  # the identity's output, the same region
    ranges.sort()
    assert ranges[0][0] == 0 and ranges[-1][1] == out.elements
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    if out.nbytes >= 1 << 20:
        assert len({s for s, stream in enumerate(plan.streams) if any(i["op"] == "run" and i["tile"] in
                    {t["id"] for t in tiles} for i in stream)}) > 64  # spread over the SMs


def test_generated_copy_passes_each_tile_its_byte_range():
    m = models.named("copy1m")
    plan = build_plan(m, DeviceSpec(num_sms=132), sm_copies=frozenset({1}))
    text = generate(m, plan).text
    e = DTYPE_BYTES["fp32"]
    assert f"const long long off = ((long long)r0 * {(1 << 20) // 4} + c0) * {e}" in text
    assert "(char*)T[" in text and "+ off, n)" in text
