"""Scenarios for the engine-level simulation tests: seeded random traffic over several queues, and a set-up
that fills every window with long copies so a reset lands with descriptors in flight."""

from __future__ import annotations

import numpy as np

from driver.abi import Flag, Perm
from driver.scenario import Scenario
from tests.conformance.builder import Builder, desc, imm

KiB = 1024
SRC_BYTES = 16 * KiB
CHUNK = 6  # descriptors a producer posts at a time; queues take turns, so all of them run together


def random_traffic(seed: int, per_queue: int, queues: int = 4, max_bytes: int = 2 * KiB,
                   fail_queue: int | None = 3) -> Scenario:
    """`per_queue` seeded random descriptors on each queue: log-uniform lengths 0..max_bytes, every source
    offset and destination lane, NOTIFY/FENCE sprinkled, IMM signals; destinations disjoint so the result
    is the same in any interleaving. Queue `fail_queue` meets an out-of-bounds descriptor 5 before its end,
    so it halts and the rest of its descriptors are dropped."""
    rng = np.random.default_rng(seed)
    b = Builder(f"traffic_s{seed}_q{queues}_n{per_queue}")
    per_queue_descs = []
    for q in range(queues):
        sizes = np.minimum((2 ** rng.uniform(0, np.log2(max_bytes + 1), per_queue)).astype(int) - 1, max_bytes)
        b.buffer(f"src{q}", SRC_BYTES)
        b.buffer(f"dst{q}", int(sizes.sum()) + 16 * per_queue + 64, "byte", 0xA5)
        b.buffer(f"sig{q}", 8 * per_queue, "byte", 0)
        rs, rd, rsig = 3 * q, 3 * q + 1, 3 * q + 2
        b.region(rs, f"src{q}", perms=Perm.READ)
        b.region(rd, f"dst{q}")
        b.region(rsig, f"sig{q}", perms=Perm.WRITE)
        b.queue(q, start=int(rng.integers(0, 1 << 40)))
        descs, base = [], 0
        for i, n in enumerate(int(s) for s in sizes):
            flags = (Flag.NOTIFY if rng.random() < 0.1 else 0) | (Flag.FENCE if rng.random() < 0.03 else 0)
            if rng.random() < 0.03:
                descs.append(imm(rsig, 8 * i, int(rng.integers(0, 1 << 63)), flags, cookie=i))
                continue
            gap = int(rng.integers(0, 16))
            src_off = int(rng.integers(0, SRC_BYTES - n + 1))
            if q == fail_queue and i == per_queue - 5:
                src_off = SRC_BYTES - n + 1  # one byte past the end: OUT_OF_BOUNDS
            descs.append(desc(rs, src_off, rd, base + gap, n, flags, cookie=i))
            base += gap + n
        per_queue_descs.append(descs)
    for start in range(0, per_queue, CHUNK):
        for q in range(queues):
            b.post(q, per_queue_descs[q][start : start + CHUNK])
    return b.build()


def full_windows(copy_bytes: int = 8 * KiB, queues: int = 4, slots: int = 16) -> tuple[Scenario, dict]:
    """Every queue's window filled with long copies (posted without waiting), each destination between
    guard bytes; returns the scenario and where each copy goes: {queue: [(src_off, dst_off, n), ...]}."""
    b = Builder("full_windows")
    b.buffer("src", copy_bytes * slots + 4096)
    b.region(0, "src", perms=Perm.READ)
    layout = {}
    for q in range(queues):
        b.buffer(f"dst{q}", slots * (copy_bytes + 64) + 64, "byte", 0xA5)
        b.region(1 + q, f"dst{q}")
        b.queue(q)
        copies = [(37 * i + 1000 * q, 64 + i * (copy_bytes + 64), copy_bytes) for i in range(slots)]
        layout[q] = copies
        b.post(q, [desc(0, s, 1 + q, d, n, Flag.NOTIFY, cookie=i) for i, (s, d, n) in enumerate(copies)])
    return b.build(), layout
