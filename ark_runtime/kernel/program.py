"""A plan as the arrays the loop kernel reads (`Program` in include/ark/loop.cuh): the per-SM instruction
streams, the tile table and the counters' op groups. Plain NumPy, built and checked without a GPU."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ark_runtime.plan import Plan

INS_RUN, INS_SIGNAL, INS_WAIT = 0, 1, 2


@dataclass(frozen=True)
class ProgramArrays:
    ins: np.ndarray  # int32 [n, 4]: kind, tile or counter, delta, the tile the instruction serves
    stream_start: np.ndarray  # int32 [num_sms + 1]
    tiles: np.ndarray  # int32 [tiles, 4]: op, r0, r1, index
    tile_cols: np.ndarray  # int32 [tiles, 2]: c0, c1
    groups: np.ndarray  # int32 [counters, 2]: first member, member count (0 for a tile counter)
    members: np.ndarray  # int32 [m]: counter ids

    @property
    def num_counters(self) -> int:
        return len(self.groups)


def build_program(plan: Plan) -> ProgramArrays:
    ins: list[tuple[int, int, int, int]] = []
    starts = [0]
    for stream in plan.streams:
        # a wait serves the next tile its stream runs; a signal, the tile just run
        pending: list[int] = []
        last_tile = -1
        for item in stream:
            if item["op"] == "run":
                last_tile = item["tile"]
                for i in pending:
                    k, c, d, _ = ins[i]
                    ins[i] = (k, c, d, last_tile)
                pending.clear()
                ins.append((INS_RUN, item["tile"], 0, item["tile"]))
            elif item["op"] == "signal":
                ins.append((INS_SIGNAL, item["counter"], 0, last_tile))
            elif item["op"] == "wait":
                pending.append(len(ins))
                ins.append((INS_WAIT, item["counter"], item["delta"], -1))
            else:
                raise ValueError(f"plan stream item {item!r} is not run, signal or wait")
        starts.append(len(ins))
    tiles = np.array([[t["op"], t["writes"][1], t["writes"][2], t["index"]] for t in plan.tiles], np.int32).reshape(-1, 4)
    cols = np.array([[t["writes"][3], t["writes"][4]] for t in plan.tiles], np.int32).reshape(-1, 2)
    groups, members = [], []
    for c in plan.counters:
        if c["kind"] == "op":
            groups.append((len(members), len(c["members"])))
            members.extend(c["members"])
        else:
            groups.append((0, 0))
    return ProgramArrays(np.array(ins, np.int32).reshape(-1, 4), np.array(starts, np.int32), tiles, cols,
                         np.array(groups, np.int32).reshape(-1, 2), np.array(members or [0], np.int32))
