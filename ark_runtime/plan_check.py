"""The plan's invariants, checked without a GPU.

Static: every tile runs exactly once per iteration; every tile counter is signalled by its tile alone, once,
after it ran, and an op group holds the counter of every tile of its op; every dependency is ordered, on
one SM by the stream and across SMs by a wait that covers it (read-after-write in the same iteration,
write-after-read against the previous one).

Dynamic: every SM's stream is run for a few iterations with one resident CTA per SM, in interleavings drawn
at random; a point where no SM can move while some still have work is a deadlock (the stuck waits are named),
and every dependency is checked on the order things actually happened.
"""

from __future__ import annotations

import random

ITERATIONS = 3
INTERLEAVINGS = 3


def _covers(counter: dict, tiles: list[dict], producer: int) -> bool:
    if counter["kind"] == "tile":
        return counter["of"] == producer
    return counter["kind"] == "op" and tiles[producer]["op"] == counter["of"]


def static_problems(plan) -> list[str]:
    problems: list[str] = []
    tiles, counters = plan.tiles, plan.counters
    where: dict[int, tuple[int, int]] = {}  # tile -> (sm, position)
    for s, stream in enumerate(plan.streams):
        for pos, ins in enumerate(stream):
            if ins["op"] == "run":
                t = ins["tile"]
                if not 0 <= t < len(tiles):
                    problems.append(f"SM {s} runs tile {t}, which does not exist")
                elif t in where:
                    problems.append(f"tile {t} runs twice (SM {where[t][0]} and SM {s})")
                else:
                    where[t] = (s, pos)
            elif ins["op"] in ("wait", "signal"):
                if not 0 <= ins["counter"] < len(counters):
                    problems.append(f"SM {s} uses counter {ins['counter']}, which does not exist")
            else:
                problems.append(f"SM {s} has an instruction {ins['op']!r}")
    problems += [f"tile {t} runs on no SM" for t in range(len(tiles)) if t not in where]
    if problems:
        return problems

    signalled: dict[int, list[int]] = {c["id"]: [] for c in counters}
    for s, stream in enumerate(plan.streams):
        last_run = None
        for ins in stream:
            if ins["op"] == "run":
                last_run = ins["tile"]
            elif ins["op"] == "signal":
                if last_run is None:
                    problems.append(f"SM {s} signals counter {ins['counter']} before running any tile")
                else:
                    signalled[ins["counter"]].append(last_run)
    tiles_of: dict[int, list[int]] = {}
    for t in tiles:
        tiles_of.setdefault(t["op"], []).append(t["id"])
    for c in counters:
        if c["kind"] == "tile":
            if signalled[c["id"]] != [c["of"]]:
                problems.append(f"counter {c['id']} of tile {c['of']} is signalled by tiles "
                                f"{sorted(signalled[c['id']])[:8]}, not by its tile once")
        elif c["kind"] == "op":
            held = sorted(counters[m]["of"] for m in c["members"] if counters[m]["kind"] == "tile")
            if held != tiles_of.get(c["of"], []) or signalled[c["id"]]:
                problems.append(f"op group {c['id']} (op {c['of']}) does not hold exactly its tiles' counters, "
                                "or is signalled itself")
        else:
            problems.append(f"counter {c['id']} has a kind {c['kind']!r}")

    # Walk each stream keeping, per counter, the largest delta waited for so far: a dependency is covered
    # when its producer's counter (or its op's group) was waited for, with enough delta, before the tile.
    tile_ctr = {c["of"]: c["id"] for c in counters if c["kind"] == "tile"}
    group = {c["of"]: c["id"] for c in counters if c["kind"] == "op"}
    readers: list[list[int]] = [[] for _ in tiles]
    for t, ds in enumerate(plan.deps):
        for p in ds:
            readers[p].append(t)

    op_of = [t["op"] for t in tiles]
    where_sm = [where[t][0] for t in range(len(tiles))]
    where_pos = [where[t][1] for t in range(len(tiles))]

    def uncovered(seen: dict[int, int], others: list[int], delta: int) -> list[int]:
        """Of tiles `others` (on other SMs), those no wait seen so far covers with `delta`: a wait on the op's group
        covers every tile of the op at once, else each tile's own counter must have been waited for."""
        left = []
        for op in {op_of[p] for p in others}:
            if seen.get(group.get(op, -1), -1) < delta:
                left += [p for p in others if op_of[p] == op and seen.get(tile_ctr.get(p, -1), -1) < delta]
        return left

    for s, stream in enumerate(plan.streams):
        seen: dict[int, int] = {}
        for ins in stream:
            if ins["op"] == "wait":
                seen[ins["counter"]] = max(seen.get(ins["counter"], -1), ins["delta"])
            elif ins["op"] == "run":
                t = ins["tile"]
                ds = plan.deps[t]  # t reads each of them
                remote = [p for p in ds if where_sm[p] != s]
                if len(remote) < len(ds):
                    here = where_pos[t]
                    problems += [f"tile {t} runs before tile {p} it reads, on SM {s}"
                                 for p in ds if where_sm[p] == s and where_pos[p] > here]
                for p in sorted(uncovered(seen, remote, 1)):
                    problems.append(f"tile {t} (SM {s}) reads tile {p} (SM {where_sm[p]}) without waiting for it")
                war = [r for r in readers[t] if where_sm[r] != s]  # t overwrites what r read last iteration
                for r in sorted(uncovered(seen, war, 0)):
                    problems.append(f"tile {t} (SM {s}) overwrites what tile {r} (SM {where_sm[r]}) read in the "
                                    "previous iteration without waiting for it")
    return problems


def run_problems(plan, iterations: int = ITERATIONS, seed: int = 0, on_run=None, orders: bool = True) -> list[str]:
    """Runs the streams `iterations` times in a random interleaving; deadlocks and (with `orders`) broken orders.
    `on_run(tile, iteration)` is called as each tile runs (ark_runtime/reference.py computes it)."""
    rng = random.Random(seed)
    counters = plan.counters
    value = [0] * len(counters)
    pc = [0] * plan.num_sms  # next instruction, counted over all iterations
    lengths = [len(s) for s in plan.streams]
    done_at: dict[tuple[int, int], int] = {}  # (tile, iteration) -> step it ran at
    step = 0
    active = [s for s in range(plan.num_sms) if lengths[s]]

    # an op group's value, the least of its members', kept as (least, members at it) and found again only when the
    # last member at the least moves on: a wait reads it in O(1)
    groups_of: dict[int, list[int]] = {}
    least: dict[int, list[int]] = {}
    for c in counters:
        if c["kind"] == "op":
            least[c["id"]] = [0, len(c["members"])] if c["members"] else [0, 1]
            for m in c["members"]:
                groups_of.setdefault(m, []).append(c["id"])

    def current(c: dict) -> int:
        return least[c["id"]][0] if c["kind"] == "op" else value[c["id"]]

    def signal(k: int) -> None:
        was = value[k]
        value[k] += 1
        for g in groups_of.get(k, ()):
            held = least[g]
            if held[0] == was:
                held[1] -= 1
                if held[1] == 0:
                    members = counters[g]["members"]
                    low = min(value[m] for m in members)
                    least[g] = [low, sum(1 for m in members if value[m] == low)]

    def blocked(s: int) -> dict | None:
        it, pos = divmod(pc[s], lengths[s])
        ins = plan.streams[s][pos]
        if ins["op"] == "wait" and current(counters[ins["counter"]]) < it + ins["delta"]:
            return ins
        return None

    while active:
        # a round: every SM with work, in a random order, runs until it blocks (or, at random, yields early)
        moved = False
        rng.shuffle(active)
        for s in active:
            while pc[s] < iterations * lengths[s] and blocked(s) is None:
                it, pos = divmod(pc[s], lengths[s])
                ins = plan.streams[s][pos]
                if ins["op"] == "run":
                    step += 1
                    done_at[(ins["tile"], it)] = step
                    if on_run is not None:
                        on_run(ins["tile"], it)
                elif ins["op"] == "signal":
                    signal(ins["counter"])
                pc[s] += 1
                moved = True
                if rng.random() < 0.3:
                    break  # let another SM move: interleavings differ
        active = [a for a in active if pc[a] < iterations * lengths[a]]
        if active and not moved:
            stuck = []
            for s in sorted(active)[:6]:
                it, pos = divmod(pc[s], lengths[s])
                w = blocked(s)
                stuck.append(f"SM {s} in iteration {it} waits for counter {w['counter']} to reach "
                             f"{it + w['delta']} (it is {current(counters[w['counter']])})")
            return [f"deadlock with {len(active)} SM(s) stuck: " + "; ".join(stuck)]

    problems = []
    for t, ds in enumerate(plan.deps if orders else ()):
        for p in ds:
            for it in range(iterations):
                if done_at[(p, it)] > done_at[(t, it)]:
                    problems.append(f"iteration {it}: tile {t} ran before tile {p} it reads")
                if it + 1 < iterations and done_at[(p, it + 1)] < done_at[(t, it)]:
                    problems.append(f"iteration {it + 1}: tile {p} overwrote what tile {t} still had to read")
    return problems[:20]


def check(plan, interleavings: int = INTERLEAVINGS) -> list[str]:
    """Every invariant broken by `plan` (empty when it holds): static, then run in `interleavings` random orders."""
    problems = static_problems(plan)
    if problems:
        return problems
    for seed in range(interleavings):
        problems = run_problems(plan, seed=seed)
        if problems:
            return problems
    return []


def check_for_planning(plan) -> list[str]:
    """What build_plan checks every plan for: the static invariants, which prove every order in every interleaving,
    and deadlock in one run of the streams. One run finds every deadlock: a wait, once met, stays met (counters only
    grow), so no SM's move can keep another's from its next step, and every maximal run of the streams stops in the
    same state (the system is persistent). The tests run `check`, which also replays the orders in several."""
    return static_problems(plan) or run_problems(plan, orders=False)
