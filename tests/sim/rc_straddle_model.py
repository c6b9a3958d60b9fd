"""A model of the UltraScale+ block's straddled 512-bit RC stream, as cocotbext-pcie's RcSource packs it with two
segments: a completion starts at lane 0, or at lane 8 of the beat where the one before it ended in lanes 0-7 if it
is already waiting; starts and ends marked in tuser (is_sop / is_sop_ptr, is_eop / is_eop_ptr)."""

from __future__ import annotations

import random

from rtl.pcie_streams import RC512_EOP_PTR, RC512_IS_EOP, RC512_IS_SOP, RC512_SOP_PTR


def straddled(frames: list[list[int]], rng: random.Random, waiting: float) -> list[tuple[int, int, int]]:
    """(tdata, tkeep, tuser) of the beats carrying `frames` (lists of DWORDs, descriptor first); a frame starts at
    lane 8 after one ending in lanes 0-7 when it is waiting (chance `waiting`)."""
    beats, todo, frame, off = [], list(frames), None, 0
    while todo or frame is not None:
        data = keep = 0
        sops, eops = [], []
        if frame is None:
            frame, off = todo.pop(0), 0
            sops.append(0)
        for seg in range(2):
            if frame is None:
                if todo and rng.random() < waiting:
                    frame, off = todo.pop(0), 0
                    sops.append(8)
                else:
                    break
            last = None
            for k in range(8):
                lane = 8 * seg + k
                if off < len(frame):
                    data |= frame[off] << 32 * lane
                    keep |= 1 << lane
                    off, last = off + 1, lane
            if off >= len(frame):
                eops.append(last)
                frame = None
        user = 0
        for k, lane in enumerate(sops):
            user |= 1 << (RC512_IS_SOP + k) | (lane // 4) << (RC512_SOP_PTR + 2 * k)
        for k, lane in enumerate(eops):
            user |= 1 << (RC512_IS_EOP + k) | lane << (RC512_EOP_PTR + 4 * k)
        beats.append((data, keep, user))
    return beats
