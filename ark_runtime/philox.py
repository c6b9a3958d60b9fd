"""Philox-4x32 in NumPy, word for word the generator of kernel/include/ark/philox.cuh (Salmon et al., SC'11;
Random123's philox4x32), and the sample op's uniform number of each row from it: counter (step, row, 0, 0) under
key (the seed's low 32 bits, its high 32 bits), the first output word's top 24 bits times 2^-24."""

from __future__ import annotations

import numpy as np

M0, M1 = 0xD2511F53, 0xCD9E8D57  # the round multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # the key's bump between rounds
MASK = 0xFFFFFFFF
SEED_LIMIT = 1 << 64  # seeds are ints in [0, 2**64)


def philox4x32(counter, key, rounds: int = 10) -> np.ndarray:
    """Philox-4x32-`rounds` of counters [..., 4] under keys [..., 2] (broadcast; uint32 words) -> [..., 4] uint32."""
    c = np.asarray(counter, dtype=np.uint64) & MASK
    k = np.asarray(key, dtype=np.uint64) & MASK
    shape = np.broadcast_shapes(c.shape[:-1], k.shape[:-1])
    c0, c1, c2, c3 = (np.broadcast_to(c[..., i], shape).copy() for i in range(4))
    k0, k1 = (np.broadcast_to(k[..., i], shape).copy() for i in range(2))
    m0, m1 = np.uint64(M0), np.uint64(M1)
    for _ in range(rounds):
        p0, p1 = m0 * c0, m1 * c2  # exact: both factors are below 2**32
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & np.uint64(MASK), (p0 >> np.uint64(32)) ^ c3 ^ k1,
                          p0 & np.uint64(MASK))
        k0, k1 = (k0 + np.uint64(W0)) & np.uint64(MASK), (k1 + np.uint64(W1)) & np.uint64(MASK)
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def sample_uniform(seed: int, steps, rows) -> np.ndarray:
    """philox.cuh's sample_uniform: the uniform number in [0, 1) (a multiple of 2^-24) of each (step, row) pair
    (int arrays, broadcast; steps taken as their two's-complement uint32) under `seed`, as float64."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < SEED_LIMIT:
        raise ValueError(f"seed={seed!r} must be an int in 0 .. 2**64 - 1")
    seed = int(seed)
    steps = np.asarray(steps, dtype=np.int64) & MASK
    rows = np.asarray(rows, dtype=np.int64) & MASK
    steps, rows = np.broadcast_arrays(steps, rows)
    zeros = np.zeros(steps.shape, np.int64)
    counter = np.stack([steps, rows, zeros, zeros], axis=-1)
    words = philox4x32(counter, np.array([seed & MASK, seed >> 32], dtype=np.uint64))
    return (words[..., 0] >> np.uint32(8)).astype(np.float64) * 2.0 ** -24
