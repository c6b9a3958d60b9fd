"""Named regression scenarios: each one a defect an engine once had (found by a reader of the docs, a
generated campaign or a user), kept so that it never comes back. The docstring names the defect."""

from __future__ import annotations

from driver.abi import Flag, Perm
from driver.scenario import Scenario
from tests.conformance.builder import Builder, desc, imm

KiB = 1024
VALUE = 0x1122_3344_5566_7788


def imm_unaligned_region_base() -> Scenario:
    """Issue 8, defect 1: an IMM whose offset is 8-aligned in a region whose bus base is not lost the bytes
    that fell into the next bus word, silently (RTL). The rule is the bus address: such an IMM halts with
    MISALIGNED on every engine, and one whose bus address is aligned lands whole."""
    b = Builder("regress_imm_unaligned_region_base")
    b.buffer("sig", 256, "byte", 0xA5)
    b.buffer("src", 4 * KiB)
    b.buffer("dst", 4 * KiB, "byte", 0xA5)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.region(2, "sig", offset=4, size=200)  # bus base = buffer + 4: not 8-aligned
    b.queue(0, start=7)
    ok = imm(2, 4, VALUE, Flag.NOTIFY, cookie=1)  # bus address buffer + 8: aligned
    bad = imm(2, 16, VALUE, cookie=2)  # offset aligned, bus address buffer + 20: not
    after = desc(0, 0, 1, 0, 512, cookie=3)
    b.post(0, [ok, bad, after])
    b.expect_value(2, 4, VALUE)
    b.expect_untouched("sig", 0, 8)
    b.expect_untouched("sig", 16, 256)
    b.expect_untouched_dst(after)
    b.expect_queue(0, completed=8, error="MISALIGNED", cookie=2, index=8)
    return b.build()


def completion_word_unaligned_region_base() -> Scenario:
    """Issue 8, defect 1 (the completion word's side): a completion word at an 8-aligned offset of a region
    whose base is not would be split across bus words; the queue halts at enable with MISALIGNED and
    writes nothing."""
    b = Builder("regress_completion_word_unaligned_base")
    b.buffer("words", 256, "byte", 0x5A)
    b.buffer("src", 4 * KiB)
    b.buffer("dst", 4 * KiB, "byte", 0xA5)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.region(2, "words", offset=4, size=128, perms=Perm.WRITE)
    b.configure(0, 2, 8, start=3)
    b.enable(0)
    b.write(0, 3, [desc(0, 0, 1, 0, 100)])
    b.ring(0, 4)
    b.expect_untouched("words", 0, 256)
    b.expect_untouched("dst", 0, 4 * KiB)
    b.expect_queue(0, completed=3, error="MISALIGNED", index=3, in_memory=False)
    return b.build()


def unknown_region_before_alignment() -> Scenario:
    """Alignment is a property of a bus address, so it is checked once the region is known: an IMM to an
    unregistered region at an odd offset is UNKNOWN_REGION, one to a read-only region PERMISSION."""
    b = Builder("regress_imm_region_checked_before_alignment")
    b.buffer("dst", 4 * KiB, "byte", 0xA5)
    b.buffer("ro", 4 * KiB)
    b.region(1, "dst")
    b.region(2, "ro", perms=Perm.READ)
    b.queue(0)
    b.queue(1)
    b.post(0, [imm(12, 4100, VALUE, cookie=1)])
    b.post(1, [imm(2, 4, VALUE, cookie=2)])
    b.expect_untouched("dst", 0, 4 * KiB)
    b.expect_queue(0, completed=0, error="UNKNOWN_REGION", cookie=1, index=0)
    b.expect_queue(1, completed=0, error="PERMISSION", cookie=2, index=0)
    return b.build()


def bus_error_stops_the_queue() -> Scenario:
    """Issue 8, defect 2: after a write that ended in BUS_ERROR, the next descriptor of the queue still ran
    (RTL) where the rules said nothing after a failing descriptor runs. A write error is known only when
    its response returns, and a pipelined engine has started the descriptors behind it by then (holding
    every descriptor until the previous one's responses are back would cost a memory round trip per
    descriptor), so the rule is now: descriptors without FENCE behind a BUS_ERROR may have written their
    own destinations (each byte its copy or untouched, nothing else) and none counts as completed; a FENCE
    or IMM descriptor never runs after it. This scenario holds every engine to exactly that."""
    b = Builder("regress_bus_error_stops_the_queue", needs=("bus_errors",))
    b.buffer("src", 16 * KiB)
    b.buffer("dst", 16 * KiB, "byte", 0xA5)
    b.buffer("sig", 64, "byte", 0)
    b.region(0, "src", perms=Perm.READ)
    b.region(1, "dst")
    b.region(2, "sig")
    b.hole(6, 64 * KiB, Perm.WRITE)
    b.queue(0, start=11)
    first = desc(0, 0, 1, 0, 2048, cookie=1)
    bad = desc(0, 0, 6, 0, 4096, cookie=2)
    may_run = [desc(0, 4096, 1, 4096, 64, cookie=3), desc(0, 4096, 1, 8192, 4096, cookie=4)]
    never = [desc(0, 0, 1, 12288, 512, Flag.FENCE, cookie=5), imm(2, 0, VALUE, cookie=6),
             desc(0, 0, 1, 13312, 8, Flag.NOTIFY, cookie=7)]
    b.post(0, [first, bad] + may_run + never)
    b.expect_copy(first)
    for d in may_run:
        b.expect_may_run(d)
    for d in never[::2]:
        b.expect_untouched_dst(d)
    b.expect_untouched("sig", 0, 64)
    b.expect_untouched("dst", 2048, 4096)
    b.expect_queue(0, completed=12, error="BUS_ERROR", cookie=2, index=12)
    return b.build()


def reset_with_copies_larger_than_the_buffer() -> Scenario:
    """Issue 8, defect 3: a global reset with two descriptors larger than the engine's data buffer in
    flight never finished at 512-bit (CONTROL.RESET stayed set). Reset is a hard stop: it must end, the
    copies in flight may have written part of their destinations (nothing else), and the engine then
    works as new. The reset lands at several points: before the first read, with reads outstanding, with
    the buffer full and writes going."""
    big = 69_632  # 68 KiB: more than the 512-bit build's 64 KiB data buffer
    b = Builder("regress_reset_with_copies_larger_than_the_buffer")
    b.buffer("src", 2 * big)
    b.buffer("after", 4 * KiB, "byte", 0)
    for k, cycles in enumerate(RESET_POINTS):
        b.buffer(f"dst{k}", 2 * big + 4 * KiB, "byte", 0xA5)
        b.region(0, "src", perms=Perm.READ)
        b.region(1, f"dst{k}")
        b.queue(0, start=10 * k)
        copies = [desc(0, 0, 1, 0, big, cookie=1), desc(0, big, 1, big + 4 * KiB, big, cookie=2)]
        b.write(0, 10 * k, copies)
        b.ring(0, 10 * k + 2)
        for d in copies:
            b.expect_may_run(d)  # (in region coordinates, before the reset empties the table)
        b.expect_untouched(f"dst{k}", big, big + 4 * KiB)
        b.idle(cycles)
        b.reset()
    b.expect_count_at_most(0, 10 * (len(RESET_POINTS) - 1) + 2)
    b.region(0, "src", perms=Perm.READ)
    b.region(2, "after")
    b.queue(1, start=3)
    d = desc(0, 100, 2, 64, 3000, Flag.NOTIFY, cookie=3)
    b.post(1, [d])
    b.expect_copy(d)
    b.expect_queue(1, completed=4)
    return b.build()


RESET_POINTS = (0, 40, 300, 800, 1500, 3000)  # engine cycles after the doorbell


def last_words_of_many_queues() -> Scenario:
    """Issue 8, defect 4, and issue 9, item 6: a queue's last completion word (after an IMM|NOTIFY and a
    zero-length NOTIFY, or after a halt) never reached memory when another queue's word was written next:
    the completion writer's `take` cleared the dirty bit of the queue it had served before. Every queue
    ends here with such a tail, and one halts, all at once."""
    b = Builder("regress_last_words_of_many_queues")
    b.buffer("src", 4 * KiB)
    b.region(0, "src", perms=Perm.READ)
    for q in range(4):
        b.buffer(f"dst{q}", 8 * KiB, "byte", 0xA5)
        b.buffer(f"sig{q}", 64, "byte", 0)
        b.region(1 + 2 * q, f"dst{q}")
        b.region(2 + 2 * q, f"sig{q}")
    for q in range(4):
        b.queue(q, start=1000 * q)
    for round_ in range(6):
        for q in range(4):
            body = [desc(0, 64 * k, 1 + 2 * q, 1024 * round_ + 64 * k, 64 + 16 * q, cookie=k) for k in range(3)]
            tail = [imm(2 + 2 * q, 8 * (round_ % 8), VALUE + round_, Flag.NOTIFY, cookie=10),
                    desc(0, 0, 1 + 2 * q, 0, 0, Flag.NOTIFY, cookie=11)]
            if q == 3 and round_ == 5:
                tail[1] = desc(0, 4 * KiB, 1 + 2 * q, 0, 8, cookie=12)  # past the source's end: halts
            b.post(q, body + tail)
    for q in range(3):
        b.expect_queue(q, completed=1000 * q + 30)
    b.expect_queue(3, completed=3000 + 29, error="OUT_OF_BOUNDS", cookie=12, index=3029)
    return b.build()


def regression_scenarios() -> list[Scenario]:
    return [imm_unaligned_region_base(), completion_word_unaligned_region_base(), unknown_region_before_alignment(),
            bus_error_stops_the_queue(), reset_with_copies_larger_than_the_buffer(), last_words_of_many_queues()]
