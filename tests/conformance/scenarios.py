"""The conformance scenarios: every engine plays all of them and must match the reference byte for byte."""

from __future__ import annotations

import numpy as np

from driver.abi import Flag, Perm
from driver.scenario import Scenario
from tests.conformance.builder import Builder, desc, imm
from tests.conformance.regressions import regression_scenarios
from tests.conformance.rules import rule_scenarios

KiB, MiB = 1024, 1 << 20
BOUNDARY_SIZES = (0, 1, 63, 64, 65, 4095, 4096, 4097, 8 * KiB, 1 * MiB)
GUARD = 256  # guard bytes on each side of every destination (inside the region, so only the length protects them)
BAD_COOKIE = 0xBADC0DE


def boundary_size(n: int) -> Scenario:
    """One copy of n bytes whose source crosses a 4 KiB boundary, into the middle of a guarded destination."""
    b = Builder(f"size_{n}")
    src_off = 4096 - 37  # crosses a 4 KiB page boundary for every n > 37
    b.buffer("src", src_off + n + 64)
    b.buffer("dst", n + 2 * GUARD + 4096, "byte", 0xA5)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.queue(0)
    d = desc(0, src_off, 1, GUARD + 4096 - 11, n, Flag.NOTIFY, cookie=n)
    b.post(0, [d])
    b.expect_copy(d)
    b.expect_untouched("dst", 0, GUARD + 4096 - 11)
    b.expect_untouched("dst", GUARD + 4096 - 11 + n, n + 2 * GUARD + 4096)
    b.expect_queue(0, completed=1)
    return b.build()


def offsets_across_pages() -> Scenario:
    """Lengths that hit every lane, at source and destination offsets just before, on and after 4 KiB lines."""
    b = Builder("offsets_across_4k")
    lengths = (1, 7, 63, 64, 65, 100, 4095, 4096, 5000)
    offsets = (0, 1, 4096 - 63, 4096 - 1, 4096, 4096 + 5, 8192 - 4096 // 3)
    b.buffer("src", 16 * KiB)
    cases = [(so, do, n) for n in lengths for so in offsets for do in offsets[::2]]
    dst_size = sum(8192 + n + 2 * GUARD for _, _, n in cases)
    b.buffer("dst", dst_size, "byte", 0x5A)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst", perms=Perm.WRITE)
    b.queue(0)
    descs, base = [], 0
    for i, (so, do, n) in enumerate(cases):
        d = desc(0, so, 1, base + GUARD + do, n, cookie=i)
        descs.append(d)
        b.expect_copy(d)
        b.expect_untouched("dst", base, base + GUARD + do)
        b.expect_untouched("dst", base + GUARD + do + n, base + 8192 + n + 2 * GUARD)
        base += 8192 + n + 2 * GUARD
    b.post(0, descs)
    b.expect_queue(0, completed=len(descs))
    return b.build()


def random_stream(seed: int, queues: int = 1, count: int = 150, placements=("host", "host")) -> Scenario:
    """Seeded random descriptors per queue: log-uniform sizes up to 64 KiB, random offsets, NOTIFY and
    FENCE sprinkled, IMM signals; destinations disjoint, so no descriptor depends on another."""
    rng = np.random.default_rng(seed)
    b = Builder(f"random_s{seed}_q{queues}" + ("" if placements == ("host", "host") else "_" + "_".join(placements)))
    for q in range(queues):
        sizes = np.minimum((2 ** rng.uniform(0, 16.1, count)).astype(int) - 1, 64 * KiB)
        src_size = 128 * KiB
        b.buffer(f"src{q}", src_size, placement=placements[0])
        dst_size = int(sum(sizes) + count * (GUARD + 64) + 4096)
        b.buffer(f"dst{q}", dst_size, "byte", 0xA5, placement=placements[1])
        b.buffer(f"sig{q}", 8 * count, "byte", 0)
        rs, rd, rsig = b.region(3 * q, f"src{q}", perms=Perm.READ), b.region(3 * q + 1, f"dst{q}"), b.region(3 * q + 2, f"sig{q}")
        start = int(rng.integers(0, 1 << 40))
        b.queue(q, start=start)
        descs, base = [], 0
        for i, n in enumerate(int(s) for s in sizes):
            flags = 0
            if rng.random() < 0.1:
                flags |= Flag.NOTIFY
            if rng.random() < 0.05:
                flags |= Flag.FENCE
            if rng.random() < 0.05:
                value = int(rng.integers(0, 1 << 63))
                descs.append(imm(rsig, 8 * i, value, flags, cookie=i))
                b.expect_value(rsig, 8 * i, value)
                continue
            so = int(rng.integers(0, src_size - n + 1))
            do = base + GUARD + int(rng.integers(0, 64))
            d = desc(rs, so, rd, do, n, flags, cookie=i)
            descs.append(d)
            b.expect_copy(d)
            base = do + n
        b.post(q, descs)
        b.expect_queue(q, completed=start + len(descs))
    return b.build()


def fence_chain() -> Scenario:
    """Each copy reads what the one before it wrote; FENCE makes that legal. Ends with an IMM signal."""
    b = Builder("fence_chain")
    b.buffer("a", 64 * KiB)
    b.buffer("work", 8 * 64 * KiB, "byte", 0)
    b.buffer("flag", 64, "byte", 0)
    b.region(0, "a", perms=Perm.READ)
    b.region(1, "work")
    b.region(2, "flag", perms=Perm.WRITE)
    b.queue(0)
    n = 40 * KiB + 3
    descs = [desc(0, 5, 1, 0, n)]
    for k in range(1, 8):
        descs.append(desc(1, (k - 1) * 64 * KiB, 1, k * 64 * KiB + k, n, Flag.FENCE, cookie=k))
    descs.append(imm(2, 8, 0x1122334455667788, Flag.NOTIFY))
    b.post(0, descs)
    b.expect_value(2, 8, 0x1122334455667788)
    b.expect_queue(0, completed=len(descs))
    return b.build()


def zero_length_and_notify() -> Scenario:
    """Zero-length copies are valid no-ops, checked like any other (one at the very end of a region)."""
    b = Builder("zero_length")
    b.buffer("src", 4096)
    b.buffer("dst", 4096, "byte", 0xA5)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.queue(0)
    descs = [desc(0, 0, 1, 0, 0, Flag.NOTIFY), desc(0, 4096, 1, 4096, 0), desc(0, 100, 1, 200, 0, Flag.FENCE)]
    b.post(0, descs)
    b.expect_untouched("dst", 0, 4096)
    b.expect_queue(0, completed=3)
    return b.build()


def ring_wrap() -> Scenario:
    """Five times round a 16-slot window, with flow control, from a start index that is not a multiple of 16."""
    b = Builder("ring_wrap")
    b.buffer("src", 64 * KiB)
    b.buffer("dst", 80 * 1024, "byte", 0)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.queue(0, start=7)
    descs = [desc(0, 37 * i, 1, 1024 * i, 1000, cookie=i) for i in range(80)]
    for d in descs:
        b.expect_copy(d)
    b.post(0, descs)
    b.expect_queue(0, completed=7 + 80)
    return b.build()


def doorbell_wrap() -> Scenario:
    """The 32-bit doorbell wraps past 2**32 while the 63-bit completion count keeps counting."""
    b = Builder("doorbell_wrap")
    b.buffer("src", 8 * KiB)
    b.buffer("dst", 40 * 256, "byte", 0)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    start = (1 << 32) - 5
    b.queue(0, start=start)
    descs = [desc(0, 64 * i, 1, 256 * i, 200, Flag.NOTIFY if i % 3 == 0 else 0, cookie=i) for i in range(40)]
    for d in descs:
        b.expect_copy(d)
    b.post(0, descs)
    b.expect_queue(0, completed=start + 40)
    return b.build()


def many_queues() -> Scenario:
    """All four queues at once, each with its own buffers and start index."""
    sc = random_stream(seed=11, queues=4, count=60)
    sc.name = "many_queues"
    return sc


# --- errors: valid work before the bad descriptor completes, nothing after it runs ---------------


def _error_case(name: str, code: str, bad: dict | None, setup=None, needs: tuple[str, ...] = ()) -> Scenario:
    """Two good copies, the bad descriptor, two more good copies. Expect: halt at index 2 with `code`
    and the bad cookie; the first two copied; the bad and later destinations untouched."""
    b = Builder(f"error_{name}", needs=needs)
    b.buffer("src", 16 * KiB)
    b.buffer("dst", 16 * KiB, "byte", 0xA5)
    b.buffer("ro", 4 * KiB)
    b.buffer("wo", 4 * KiB, "byte", 0x3C)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.region(2, "ro", perms=Perm.READ)
    b.region(3, "wo", perms=Perm.WRITE)
    if setup:
        setup(b)
    b.queue(0, start=100)
    good = [desc(0, 0, 1, 0, 1000, cookie=1), desc(0, 2000, 1, 1024, 3000, cookie=2)]
    later = [desc(0, 0, 1, 8192, 512, Flag.NOTIFY, cookie=4), desc(0, 512, 1, 9000, 512, cookie=5)]
    bad = dict(bad, cookie=BAD_COOKIE)
    b.post(0, good + [bad] + later)
    for d in good:
        b.expect_copy(d)
    for d in later:
        b.expect_untouched_dst(d)
    b.expect_untouched("wo", 0, 4096)
    b.expect_untouched("dst", 4096, 8192)
    b.expect_queue(0, completed=102, error=code, cookie=BAD_COOKIE, index=102)
    return b.build()


def error_scenarios() -> list[Scenario]:
    big = (1 << 64) - 16
    return [
        _error_case("flags_unknown_bit", "INVALID_DESCRIPTOR", desc(0, 0, 1, 4096, 64, flags=1 << 5)),
        _error_case("reserved_nonzero", "INVALID_DESCRIPTOR", desc(0, 0, 1, 4096, 64, reserved=1)),
        _error_case("imm_zero_length", "BAD_LENGTH", imm(1, 4096, 7, length=0)),
        _error_case("imm_long", "BAD_LENGTH", imm(1, 4096, 7, length=16)),
        _error_case("imm_misaligned", "MISALIGNED", imm(1, 4100, 7)),
        _error_case("unknown_src_region", "UNKNOWN_REGION", desc(9, 0, 1, 4096, 64)),
        _error_case("region_beyond_table", "UNKNOWN_REGION", desc(0, 0, 200, 0, 64)),
        _error_case("region_cleared", "UNKNOWN_REGION", desc(0, 0, 4, 0, 64),
                    setup=lambda b: (b.buffer("spare", 2048), b.region(4, "spare"), b.clear_region(4))),
        _error_case("imm_unknown_region", "UNKNOWN_REGION", imm(12, 0, 7)),
        _error_case("src_not_readable", "PERMISSION", desc(3, 0, 1, 4096, 64)),
        _error_case("dst_not_writable", "PERMISSION", desc(0, 0, 2, 0, 64)),
        _error_case("imm_dst_not_writable", "PERMISSION", imm(2, 0, 7)),
        _error_case("src_past_end", "OUT_OF_BOUNDS", desc(0, 16 * KiB - 63, 1, 4096, 64)),
        _error_case("dst_past_end", "OUT_OF_BOUNDS", desc(0, 0, 3, 4096 - 63, 64)),
        _error_case("offset_wraps_64_bits", "OUT_OF_BOUNDS", desc(0, big, 1, 4096, 64)),
        _error_case("length_huge", "OUT_OF_BOUNDS", desc(0, 0, 1, 4096, (1 << 32) - 1)),
        _error_case("imm_past_end", "OUT_OF_BOUNDS", imm(3, 4096, 7)),
        _error_case("overlap", "OVERLAP", desc(1, 4096, 1, 4096 + 100, 200)),
        _error_case("hole_bus_error", "BUS_ERROR", desc(6, 0, 1, 4096, 256),
                    setup=lambda b: b.hole(6, 64 * KiB, Perm.READ), needs=("bus_errors",)),
        # when several checks fail, the first in ErrorCode order wins
        _error_case("priority_flags_over_region", "INVALID_DESCRIPTOR", desc(9, big, 200, 0, 64, flags=1 << 7)),
        _error_case("priority_region_over_bounds", "UNKNOWN_REGION", desc(0, big, 9, 0, 64)),
        _error_case("priority_perm_over_bounds", "PERMISSION", desc(3, big, 1, 4096, 64)),
    ]


def doorbell_backwards() -> Scenario:
    """Three posted, the doorbell moved back: the three still run, then the queue halts."""
    b = Builder("error_doorbell_backwards")
    b.buffer("src", 4096)
    b.buffer("dst", 8192, "byte", 0xA5)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.queue(0, start=50)
    descs = [desc(0, 0, 1, 1024 * i, 1000, cookie=i) for i in range(3)]
    b.write(0, 50, descs + [desc(0, 0, 1, 4096, 100)])
    b.ring(0, 53)
    b.ring(0, 51)
    b.ring(0, 54)  # ignored: the queue is halting
    for d in descs:
        b.expect_copy(d)
    b.expect_untouched("dst", 4096, 8192)
    b.expect_queue(0, completed=53, error="DOORBELL_BACKWARDS", index=51)
    return b.build()


def ring_overflow() -> Scenario:
    """A doorbell more than SLOTS ahead of the completed count is refused and halts the queue."""
    b = Builder("error_ring_overflow")
    b.buffer("src", 4096)
    b.buffer("dst", 4096, "byte", 0xA5)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    start = (1 << 32) - 3  # and across the 32-bit wrap
    b.queue(0, start=start)
    b.write(0, start, [desc(0, 0, 1, 0, 100)] * 16)
    b.ring(0, start + 17)
    b.expect_untouched("dst", 0, 4096)
    b.expect_queue(0, completed=start, error="RING_OVERFLOW", index=(start + 17) & 0xFFFFFFFF)
    return b.build()


def ring_full_is_fine() -> Scenario:
    """Exactly SLOTS posted in one doorbell is legal."""
    b = Builder("ring_exactly_full")
    b.buffer("src", 4096)
    b.buffer("dst", 16 * 256, "byte", 0)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.queue(0)
    descs = [desc(0, 16 * i, 1, 256 * i, 256, cookie=i) for i in range(16)]
    b.write(0, 0, descs)
    b.ring(0, 16)
    for d in descs:
        b.expect_copy(d)
    b.expect_queue(0, completed=16)
    return b.build()


def bad_completion_location() -> Scenario:
    """A queue whose completion word would land in a read-only region halts at enable and writes nothing."""
    b = Builder("error_completion_location")
    b.buffer("src", 4096)
    b.buffer("dst", 4096, "byte", 0xA5)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.configure(0, 0, 64, start=9)
    b.enable(0)
    b.write(0, 9, [desc(0, 0, 1, 0, 100)])
    b.ring(0, 10)
    b.expect_untouched("dst", 0, 4096)
    b.expect_untouched("src", 0, 4096)  # the would-be completion word's home is unchanged
    b.expect_queue(0, completed=9, error="PERMISSION", index=9, in_memory=False)
    return b.build()


def ignored_doorbells() -> Scenario:
    """Doorbells of a queue that is not enabled move nothing."""
    b = Builder("doorbell_while_disabled")
    b.buffer("src", 4096)
    b.buffer("dst", 4096, "byte", 0xA5)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.queue(0, enable=False)
    b.write(0, 0, [desc(0, 0, 1, 0, 100)])
    b.ring(0, 1)
    b.expect_untouched("dst", 0, 4096)
    return b.build()


def restart_after_error() -> Scenario:
    """Halt, then disable and re-enable at a new start: the queue works again and the error is cleared."""
    b = Builder("restart_after_error")
    b.buffer("src", 4096)
    b.buffer("dst", 8192, "byte", 0xA5)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.queue(0)
    b.post(0, [desc(0, 0, 1, 0, 100), desc(0, 4000, 1, 200, 100, cookie=7)])
    b.wait_idle()
    b.disable(0)
    b.queue(0, start=1000)
    d = desc(0, 10, 1, 4096, 3000, Flag.NOTIFY)
    b.post(0, [d])
    b.expect_copy(d)
    b.expect_untouched("dst", 200, 300)
    b.expect_queue(0, completed=1001)
    return b.build()


def errors_on_two_queues() -> Scenario:
    """Two queues halt; the error log holds both, the other two queues carry on."""
    b = Builder("errors_on_two_queues")
    b.buffer("src", 8192)
    b.buffer("dst", 4 * 8192, "byte", 0xA5)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    for q in range(4):
        b.queue(q, start=10 * q)
    for q in range(4):
        d = desc(0, 0, 1, 8192 * q, 4096, cookie=q)
        bad = desc(1, 0, 0, 0, 16, cookie=0xE0 + q) if q % 2 else desc(0, 8, 1, 8192 * q + 4096, 64)
        b.post(q, [d, bad])
        b.expect_copy(d)
        if q % 2:
            b.expect_queue(q, completed=10 * q + 1, error="PERMISSION", cookie=0xE0 + q, index=10 * q + 1)
        else:
            b.expect_queue(q, completed=10 * q + 2)
    return b.build()


def disable_in_flight() -> Scenario:
    """Disable a queue with large copies in flight: everything below the completed count is done
    exactly, nothing above it has touched memory; then the queue restarts and works."""
    b = Builder("disable_in_flight", prefix=True)
    b.buffer("src", 256 * KiB)
    b.buffer("dst", 12 * 256 * KiB, "byte", 0xA5)
    b.buffer("dst2", 4096, "byte", 0)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.region(2, "dst2")
    b.queue(0, start=3)
    b.write(0, 3, [desc(0, 0, 1, 256 * KiB * i, 256 * KiB, cookie=i) for i in range(12)])
    b.ring(0, 15)
    b.advance(5)
    b.disable(0)
    b.expect["prefix"] = {"slot": 0, "start": 3}  # how far the engine got, from the first run's word
    b.queue(0, start=500, completion_slot=3)  # the first run's final count stays readable in slot 0
    d = desc(0, 77, 2, 100, 1000, Flag.NOTIFY)
    b.post(0, [d])
    b.expect_copy(d)
    return b.build()


def reset_and_reuse() -> Scenario:
    """A global reset clears queues and regions; the engine is then programmed again and works."""
    b = Builder("reset_and_reuse")
    b.buffer("src", 8192)
    b.buffer("dst", 8192, "byte", 0)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.queue(0)
    b.post(0, [desc(0, 0, 1, 0, 1000)])
    b.wait_idle()
    b.reset()
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.queue(0, start=77)
    d = desc(0, 3000, 1, 4000, 2000)
    b.post(0, [d, desc(2, 0, 1, 0, 8, cookie=5)])  # region 2 was never registered again
    b.expect_copy(d)
    b.expect_queue(0, completed=78, error="UNKNOWN_REGION", cookie=5, index=78)
    return b.build()


def all_scenarios() -> list[Scenario]:
    scenarios = [boundary_size(n) for n in BOUNDARY_SIZES]
    scenarios += [
        offsets_across_pages(),
        random_stream(1),
        random_stream(2, queues=2),
        random_stream(3, placements=("device", "host")),
        random_stream(4, placements=("host", "device")),
        random_stream(5, placements=("device", "device")),
        many_queues(),
        fence_chain(),
        zero_length_and_notify(),
        ring_wrap(),
        ring_full_is_fine(),
        doorbell_wrap(),
        doorbell_backwards(),
        ring_overflow(),
        bad_completion_location(),
        ignored_doorbells(),
        restart_after_error(),
        errors_on_two_queues(),
        disable_in_flight(),
        reset_and_reuse(),
    ]
    scenarios += error_scenarios()
    scenarios += regression_scenarios()
    scenarios += rule_scenarios()
    names = [s.name for s in scenarios]
    assert len(names) == len(set(names)), "scenario names must be unique"
    return scenarios
