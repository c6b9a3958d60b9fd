"""Pre-armed plans of the software engine's CUDA executor, driven from the CPU: rounds run only when the
trigger word reaches them, in order, with the done word counting rounds; descriptors are validated as a
queue validates them; regions under an open plan stay put; closing fences off untriggered rounds for good.

Runs on a GPU machine; in CI against the CUDA driver test double (tests/host/test_cuda_executor_on_fake_driver.py).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from driver.abi import COMPLETION_ERROR_BIT, ErrorCode, Flag, Perm
from driver.device import Device
from driver.dtypes import DESCRIPTOR_DTYPE
from driver.errors import ArkdmaError
from host.native import EngineArgumentError

pytestmark = pytest.mark.gpu
KiB = 1024


@pytest.fixture(scope="module")
def cuda():
    from host import native
    from host.provider import CudaProvider

    reason = CudaProvider().unavailable_reason()
    if reason:
        pytest.skip(f"software-cuda cannot run here: {reason}")
    return native.cuda_probe()


@pytest.fixture
def rig(cuda):
    from host.engine import SoftwareEngine

    with Device(SoftwareEngine("cuda", num_regions=8)) as dev:
        src = dev.alloc(64 * KiB, "device")
        dst = dev.alloc(64 * KiB, "host")
        dst.write(0, b"\xa5" * dst.size)
        rs, rd = dev.register(src, perms=Perm.READ), dev.register(dst, perms=Perm.WRITE)
        yield dev, src, dst, rs.id, rd.id


def plan_descriptors(pairs, src_region, dst_region, length=4 * KiB, flags=0):
    d = np.zeros(len(pairs), DESCRIPTOR_DTYPE)
    for i, (s, t) in enumerate(pairs):
        d[i] = (s, t, length, src_region, dst_region, flags, 0, i)
    return d


def word(engine, addr: int, n: int) -> int:
    return int.from_bytes(engine.read_bus(addr, n), "little")


def trigger(engine, plan, round_: int) -> None:
    engine.write_bus(plan.trigger, (round_ & 0xFFFFFFFF).to_bytes(4, "little"))


def wait_done(engine, plan, round_: int, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        w = word(engine, plan.done, 8)
        if w >> COMPLETION_ERROR_BIT:
            raise ArkdmaError(f"plan failed: {engine.note()}")
        if w >= round_:
            return w
        if time.monotonic() > deadline:
            raise TimeoutError(f"done word stayed at {w}, waited for round {round_}")
        time.sleep(1e-4)


def test_rounds_run_when_triggered_and_copy_what_the_source_holds_then(rig):
    dev, src, dst, rs, rd = rig
    eng = dev.backend
    plan = eng.open_plan(plan_descriptors([(0, 0), (8 * KiB, 16 * KiB)], rs, rd), depth=4)
    eng.arm_plan(plan.id, 6)
    time.sleep(0.05)
    assert word(eng, plan.done, 8) == 0 and dst.read(0, 8) == b"\xa5" * 8, "a round ran before its trigger"
    for r in range(1, 7):
        payload = bytes([r]) * (4 * KiB)
        src.write(0, payload)
        src.write(8 * KiB, payload[::-1])
        trigger(eng, plan, r)
        assert wait_done(eng, plan, r) == r
        assert dst.read(0, 4 * KiB) == payload and dst.read(16 * KiB, 4 * KiB) == payload[::-1]
        assert dst.read(4 * KiB, 12 * KiB) == b"\xa5" * (12 * KiB), "bytes outside the destinations changed"
    st = eng.plan_state(plan.id)
    assert (st.requested, st.armed, st.completed, st.failed) == (6, 6, 6, False)
    assert eng.close_plan(plan.id) == 0


def test_one_trigger_releases_every_armed_round_up_to_it_and_the_engine_tops_up(rig):
    dev, src, dst, rs, rd = rig
    eng = dev.backend
    plan = eng.open_plan(plan_descriptors([(0, 0)], rs, rd, length=64), depth=2)
    eng.arm_plan(plan.id, 10)
    assert eng.plan_state(plan.id).armed == 2  # depth caps what waits ahead
    trigger(eng, plan, 10)  # the GPU may run ahead: later rounds start as the engine arms them
    assert wait_done(eng, plan, 10) == 10
    assert eng.plan_state(plan.id).completed == 10
    assert eng.close_plan(plan.id) == 0


def test_closing_fences_off_untriggered_rounds_for_good(rig):
    dev, src, dst, rs, rd = rig
    eng = dev.backend
    src.write(0, b"\x11" * 4096)
    plan = eng.open_plan(plan_descriptors([(0, 0)], rs, rd), depth=4)
    eng.arm_plan(plan.id, 4)
    trigger(eng, plan, 1)
    wait_done(eng, plan, 1)
    assert eng.close_plan(plan.id, timeout=0.5) == 3
    dst.write(0, b"\xa5" * 4096)
    trigger(eng, plan, 4)  # a stale producer: the words stay allocated, the gate is shut
    time.sleep(0.1)
    assert dst.read(0, 4096) == b"\xa5" * 4096, "a fenced-off round moved data after close"
    assert word(eng, plan.done, 8) == 1


@pytest.mark.parametrize(("bad", "code"), [
    ({"dst_region": 7}, ErrorCode.UNKNOWN_REGION),
    ({"src_offset": 62 * KiB}, ErrorCode.OUT_OF_BOUNDS),
    ({"swap": True}, ErrorCode.PERMISSION),
    ({"flags": Flag.NOTIFY}, ErrorCode.INVALID_DESCRIPTOR),
    ({"flags": Flag.IMM}, ErrorCode.INVALID_DESCRIPTOR),
])
def test_bad_descriptors_are_refused_by_index_and_code(rig, bad, code):
    from host.engine import PlanError

    dev, src, dst, rs, rd = rig
    eng = dev.backend
    d = plan_descriptors([(0, 0), (0, 8 * KiB)], rs, rd)
    if bad.get("swap"):
        d[1]["src_region"], d[1]["dst_region"] = rd, rs
    for k, v in bad.items():
        if k != "swap":
            d[1][k] = v
    with pytest.raises(PlanError, match=f"descriptor 1 of the plan: {code.name}") as info:
        eng.open_plan(d)
    assert info.value.index == 1 and info.value.code == code


def test_plan_limits_and_unknown_plans_are_clear_errors(rig):
    dev, src, dst, rs, rd = rig
    eng = dev.backend
    with pytest.raises(EngineArgumentError, match="use depth <= "):
        eng.open_plan(plan_descriptors([(0, 0)] * 100, rs, rd, length=64), depth=8)
    with pytest.raises(EngineArgumentError, match="depth"):
        eng.open_plan(plan_descriptors([(0, 0)], rs, rd), depth=0)
    with pytest.raises(ValueError, match="DESCRIPTOR_DTYPE"):
        eng.open_plan(np.zeros(2, np.uint64))
    with pytest.raises(EngineArgumentError, match="plan 99 is not open"):
        eng.arm_plan(99, 1)


def test_regions_under_an_open_plan_cannot_change(rig):
    dev, src, dst, rs, rd = rig
    eng = dev.backend
    plan = eng.open_plan(plan_descriptors([(0, 0)], rs, rd))
    with pytest.raises(EngineArgumentError, match=f"region {rd} is used by pre-armed plan {plan.id}"):
        eng.clear_region(rd)
    assert eng.close_plan(plan.id) == 0
    eng.clear_region(rd)  # free again once the plan is closed

