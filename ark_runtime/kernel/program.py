"""A plan as the arrays the loop kernel reads (`Program` in include/ark/loop.cuh): the per-SM instruction
streams and the members of the counters' op groups. Plain NumPy, built and checked without a GPU.

Each instruction is eight int32 and carries all that the kernel needs to act on it, so a CTA stages its
stream in shared memory in chunks and touches no other table between a counter's signal and its next
tile's loads (every such table read is a round trip to L2 after a wait's acquire load):
  run:    (RUN, tile, op, r0, r1, c0, c1, the op's case in the kernel's run_tile)
  signal: (SIGNAL, counter, 0, the tile just run, ranks, ranks >> 32, 0, 0): `ranks`, in a World's kernel, the other
          ranks whose copies of the counter the signal adds to as well (a 64-bit mask; 0 for one GPU)
  wait:   (WAIT, counter, delta, the tile it serves, first member, members (0: the counter's own word), 0, 0)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ark_runtime.plan import Plan

from ark_runtime.kernel.codes import Ins

INS_RUN, INS_SIGNAL, INS_WAIT = Ins.RUN.value, Ins.SIGNAL.value, Ins.WAIT.value
INS_WORDS = 8  # int32 per instruction (loop.cuh: two int4)


@dataclass(frozen=True)
class ProgramArrays:
    ins: np.ndarray  # int32 [n, INS_WORDS], as above
    stream_start: np.ndarray  # int32 [num_sms + 1]
    members: np.ndarray  # int32 [m]: the tile counters of every op group
    num_counters: int


def build_program(plan: Plan, op_cases: tuple[int, ...], streams: list[list[dict]] | None = None,
                  push: dict[int, int] | None = None) -> ProgramArrays:
    """The plan's per-SM streams as instructions (loop.cuh). `op_cases`: per op, its case in the generated kernel's
    run_tile (KernelSource.op_cases of the plan's kernel). A World's rank: `streams`, its SMs' streams of the World's
    plan, and `push`, per counter the mask of other ranks its signals reach (world_plan.push_masks)."""
    ops = len(plan.model["ops"])
    if len(op_cases) != ops:
        raise ValueError(f"op_cases has {len(op_cases)} entries for the plan's {ops} ops: pass the "
                         "KernelSource.op_cases generated from this plan")
    groups, members = [], []
    for c in plan.counters:
        if c["kind"] == "op":
            groups.append((len(members), len(c["members"])))
            members.extend(c["members"])
        else:
            groups.append((0, 0))
    ins: list[list[int]] = []
    starts = [0]
    for stream in plan.streams if streams is None else streams:
        # a wait serves the next tile its stream runs; a signal, the tile just run
        pending: list[int] = []
        last_tile = -1
        for item in stream:
            if item["op"] == "run":
                last_tile = t = item["tile"]
                for i in pending:
                    ins[i][3] = t
                pending.clear()
                tile = plan.tiles[t]
                _, r0, r1, c0, c1 = tile["writes"]
                ins.append([INS_RUN, t, tile["op"], r0, r1, c0, c1, op_cases[tile["op"]]])
            elif item["op"] == "signal":
                ranks = (push or {}).get(item["counter"], 0)
                lo, hi = ranks & 0xFFFFFFFF, ranks >> 32
                ins.append([INS_SIGNAL, item["counter"], 0, last_tile, lo - (lo >> 31 << 32), hi - (hi >> 31 << 32),
                            0, 0])
            elif item["op"] == "wait":
                first, count = groups[item["counter"]]
                pending.append(len(ins))
                ins.append([INS_WAIT, item["counter"], item["delta"], -1, first, count, 0, 0])
            else:
                raise ValueError(f"plan stream item {item!r} is not run, signal or wait")
        starts.append(len(ins))
    return ProgramArrays(np.array(ins, np.int32).reshape(-1, INS_WORDS), np.array(starts, np.int32),
                         np.array(members or [0], np.int32), len(plan.counters))


def tensor_words(addresses: list[int], maps: dict[int, np.ndarray], maps_at: int) -> np.ndarray:
    """Program.tensors as uint64 words: the tensors' addresses in id order, then from word `maps_at` (a multiple of 8:
    64-byte aligned in a 256-byte aligned allocation) each 128-byte tensor map at its index."""
    if maps_at < len(addresses) or maps_at % 8:
        raise ValueError(f"the tensor maps start at word {maps_at}: past the {len(addresses)} addresses and a multiple "
                         "of 8")
    words = np.zeros(maps_at + 16 * (max(maps, default=-1) + 1), np.uint64)
    words[:len(addresses)] = addresses
    for index, m in maps.items():
        if m.dtype != np.uint8 or m.shape != (128,):
            raise ValueError(f"tensor map {index} is {m.dtype} {m.shape}, not 128 bytes")
        words[maps_at + 16 * index:maps_at + 16 * (index + 1)] = m.view(np.uint64)
    return words
