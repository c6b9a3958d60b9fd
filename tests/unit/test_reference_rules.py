"""Rules of docs/abi-rules.md checked directly on the reference engine (the suite compares other engines to it)."""

from __future__ import annotations

import pytest

from driver.abi import COMPLETION_COUNT_MASK, ErrorCode, Flag, Perm
from driver.descriptor import Descriptor
from driver.reference_engine import DOORBELL_MASK, ReferenceEngine, Region, validate


def engine_with_queue(start: int = 0, slots: int = 8):
    eng = ReferenceEngine(num_queues=1, slots=slots, num_regions=4)
    buf = eng.alloc(1 << 16)
    eng.set_region(0, buf.addr, 1 << 16, int(Perm.READ | Perm.WRITE))
    eng.configure_queue(0, 0, 0, start)
    eng.enable_queue(0)
    return eng, buf


def word(buf) -> int:
    return int.from_bytes(buf.read(0, 8), "little")


def test_validate_checks_in_priority_order():
    regions = [Region(0x1000, 4096, Perm.READ), Region(0x4000, 4096, Perm.WRITE), None, None]
    ok = Descriptor(0, 0, 1, 0, 64)
    assert validate(ok, regions) == ErrorCode.NONE
    assert validate(Descriptor(0, 0, 1, 0, 64, flags=0x8000), regions) == ErrorCode.INVALID_DESCRIPTOR
    assert validate(Descriptor(0, 0, 1, 0, 0), regions) == ErrorCode.NONE  # zero length is a valid no-op
    assert validate(Descriptor(0, 0, 1, 0, 4, flags=Flag.IMM), regions) == ErrorCode.BAD_LENGTH
    assert validate(Descriptor(0, 0, 1, 4, 8, flags=Flag.IMM), regions) == ErrorCode.MISALIGNED
    assert validate(Descriptor(2, 0, 1, 0, 64), regions) == ErrorCode.UNKNOWN_REGION
    assert validate(Descriptor(1, 0, 1, 0, 64), regions) == ErrorCode.PERMISSION
    assert validate(Descriptor(0, 4090, 1, 0, 64), regions) == ErrorCode.OUT_OF_BOUNDS
    assert validate(Descriptor(0, 0, 1, 4033, 64), regions) == ErrorCode.OUT_OF_BOUNDS


def test_completion_counter_starts_at_the_queue_start_and_wraps_the_doorbell():
    start = DOORBELL_MASK - 2  # three descriptors before the 32-bit doorbell wraps
    eng, buf = engine_with_queue(start)
    assert word(buf) == start
    eng.write_slots(0, start, b"".join(Descriptor(0, 4096, 0, 8192 + 64 * i, 64).pack() for i in range(6)))
    eng.ring(0, (start + 6) & DOORBELL_MASK)
    eng.run()
    assert word(buf) & COMPLETION_COUNT_MASK == start + 6
    assert not eng.queue_state(0).halted


def test_a_doorbell_moving_backwards_halts_with_its_code_and_moves_nothing():
    eng, buf = engine_with_queue(16)
    before = buf.read(0, 1 << 16)
    eng.ring(0, 15)
    eng.run()
    st = eng.queue_state(0)
    assert (st.halted, st.error, st.error_index) == (True, ErrorCode.DOORBELL_BACKWARDS, 15)
    after = buf.read(0, 1 << 16)
    assert after[8:] == before[8:] and word(buf) >> 63 == 1


def test_ring_overflow_is_refused():
    eng, buf = engine_with_queue(0, slots=8)
    eng.ring(0, 9)
    eng.run()
    assert eng.queue_state(0).error == ErrorCode.RING_OVERFLOW
    assert word(buf) & COMPLETION_COUNT_MASK == 0


def test_immediate_writes_its_value_and_notify_writes_the_counter_early():
    eng, buf = engine_with_queue()
    eng.write_slots(0, 0, Descriptor(0, 4096, 0, 8192, 64, flags=Flag.NOTIFY).pack()
                    + Descriptor.immediate(0, 512, 0x1122334455667788).pack())
    eng.ring(0, 2)
    eng.step()
    assert word(buf) == 1  # NOTIFY: the counter lands after the first descriptor
    eng.step()
    assert buf.read(512, 8) == (0x1122334455667788).to_bytes(8, "little") and word(buf) == 2


def test_no_counter_write_between_descriptors_without_notify():
    eng, buf = engine_with_queue()
    eng.write_slots(0, 0, b"".join(Descriptor(0, 4096, 0, 8192 + 64 * i, 64).pack() for i in range(3)))
    eng.ring(0, 3)
    eng.step()
    assert word(buf) == 0
    eng.run()
    assert word(buf) == 3


def test_the_engine_rejects_unknown_queues_and_regions():
    eng, _ = engine_with_queue()
    with pytest.raises(ValueError, match="queue 3 does not exist"):
        eng.ring(3, 1)
    with pytest.raises(ValueError, match="region id 9 is outside"):
        eng.set_region(9, 0, 64, 1)
