"""The plan's invariants, checked without a GPU.

Static: every tile runs exactly once per iteration; every counter is signalled by exactly the tiles it counts,
each after it ran; every dependency is ordered, on one SM by the stream and across SMs by a wait that covers
it (read-after-write in the same iteration, write-after-read against the previous one).

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
    for c in counters:
        members = [c["of"]] if c["kind"] == "tile" else [t["id"] for t in tiles if t["op"] == c["of"]]
        if sorted(signalled[c["id"]]) != sorted(members) or len(members) != c["per_iteration"]:
            problems.append(f"counter {c['id']} ({c['kind']} {c['of']}) is signalled by tiles "
                            f"{sorted(signalled[c['id']])[:8]}, not by {sorted(members)[:8]} once each")

    def waited_before(t: int, producer: int, delta: int) -> bool:
        s, pos = where[t]
        return any(ins["op"] == "wait" and ins["delta"] >= delta and _covers(counters[ins["counter"]], tiles, producer)
                   for ins in plan.streams[s][:pos])

    for t, ds in enumerate(plan.deps):
        for p in ds:
            (sp, pp), (st, pt) = where[p], where[t]
            if sp == st:
                if pp > pt:
                    problems.append(f"tile {t} runs before tile {p} it reads, on SM {st}")
            else:
                if not waited_before(t, p, 1):
                    problems.append(f"tile {t} (SM {st}) reads tile {p} (SM {sp}) without waiting for it")
                if not waited_before(p, t, 0):
                    problems.append(f"tile {p} (SM {sp}) overwrites what tile {t} (SM {st}) read in the previous "
                                    "iteration without waiting for it")
    return problems


def run_problems(plan, iterations: int = ITERATIONS, seed: int = 0) -> list[str]:
    """Runs the streams `iterations` times in a random interleaving; deadlocks and broken orders."""
    rng = random.Random(seed)
    counters = plan.counters
    value = [0] * len(counters)
    pc = [0] * plan.num_sms  # next instruction, counted over all iterations
    lengths = [len(s) for s in plan.streams]
    done_at: dict[tuple[int, int], int] = {}  # (tile, iteration) -> step it ran at
    step = 0
    active = [s for s in range(plan.num_sms) if lengths[s]]

    def blocked(s: int) -> dict | None:
        it, pos = divmod(pc[s], lengths[s])
        ins = plan.streams[s][pos]
        if ins["op"] == "wait":
            c = counters[ins["counter"]]
            if value[c["id"]] < (it + ins["delta"]) * c["per_iteration"]:
                return ins
        return None

    while active:
        runnable = [s for s in active if blocked(s) is None]
        if not runnable:
            stuck = []
            for s in active[:6]:
                it, pos = divmod(pc[s], lengths[s])
                w = blocked(s)
                stuck.append(f"SM {s} in iteration {it} waits for counter {w['counter']} to reach "
                             f"{(it + w['delta']) * counters[w['counter']]['per_iteration']} (it is "
                             f"{value[w['counter']]})")
            return [f"deadlock with {len(active)} SM(s) stuck: " + "; ".join(stuck)]
        s = rng.choice(runnable)
        # run this SM until it blocks or finishes (an SM runs on while it can, like a resident CTA)
        while pc[s] < iterations * lengths[s] and blocked(s) is None:
            it, pos = divmod(pc[s], lengths[s])
            ins = plan.streams[s][pos]
            if ins["op"] == "run":
                step += 1
                done_at[(ins["tile"], it)] = step
            elif ins["op"] == "signal":
                value[ins["counter"]] += 1
            pc[s] += 1
            if rng.random() < 0.3:
                break  # let another SM move: interleavings differ
        active = [a for a in active if pc[a] < iterations * lengths[a]]

    problems = []
    for t, ds in enumerate(plan.deps):
        for p in ds:
            for it in range(iterations):
                if done_at[(p, it)] > done_at[(t, it)]:
                    problems.append(f"iteration {it}: tile {t} ran before tile {p} it reads")
                if it + 1 < iterations and done_at[(p, it + 1)] < done_at[(t, it)]:
                    problems.append(f"iteration {it + 1}: tile {p} overwrote what tile {t} still had to read")
    return problems[:20]


def check(plan, interleavings: int = INTERLEAVINGS) -> list[str]:
    """Every invariant broken by `plan` (empty when it holds)."""
    problems = static_problems(plan)
    if problems:
        return problems
    for seed in range(interleavings):
        problems = run_problems(plan, seed=seed)
        if problems:
            return problems
    return []
