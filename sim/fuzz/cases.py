"""Generated conformance cases: a Hypothesis strategy that draws region layouts, descriptor mixes over
several queues, RTL timing and a control event, and turns them into a plain driver.scenario.Scenario.

Every queue q owns its buffers (src{q}, dst{q}, sig{q}) so queues never touch each other's bytes and a
prefix of one queue can be judged alone. Destinations of one queue are disjoint and sources are read-only,
so no descriptor depends on another (the FENCE rule never applies) and every engine must match the
reference byte for byte."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

from driver.abi import Flag, Perm
from driver.scenario import BufferSpec, Scenario

GEOMETRY = {"num_queues": 4, "slots": 16, "num_regions": 16}
COMPLETION_REGION, HOLE_REGION, UNREGISTERED_REGION = 15, 14, 13
COMPLETION_STRIDE = 64
GUARD = 64  # guard bytes around every region, outside it: only the engine's bounds check protects them
GUARD_BYTE = 0xA5
SRC_SIZE = 12 * 1024
BOUNDARY_LENGTHS = (0, 1, 7, 8, 9, 63, 64, 65, 127, 128, 511, 512, 4095, 4096, 4097)
ERROR_KINDS = ("INVALID_DESCRIPTOR", "BAD_LENGTH", "MISALIGNED", "UNKNOWN_REGION", "PERMISSION",
               "OUT_OF_BOUNDS", "OVERLAP", "BUS_ERROR_WRITE", "BUS_ERROR_READ")
READ_LATENCIES_NS = (8.0, 40.0, 120.0, 400.0, 1770.0)
WRITE_LATENCIES_NS = (8.0, 40.0, 120.0, 1770.0)


@dataclass
class Case:
    """One generated run: the scenario plus what the oracle needs to judge it."""

    scenario: Scenario
    control: dict  # {"kind": "none"} | {"kind": "disable", "queue": q, "after": n} | {"kind": "reset", "after": n}
    queues: dict[int, dict]  # q -> {"start": s, "descriptors": [...]} as posted
    timing: dict = field(default_factory=dict)  # sim.tb.Timing fields (RTL only)
    pause: dict | None = None  # sim.stress_jobs pause spec (RTL only)

    @property
    def descriptors(self) -> int:
        return sum(len(q["descriptors"]) for q in self.queues.values())

    @property
    def bytes(self) -> int:
        return sum(d["length"] for q in self.queues.values() for d in q["descriptors"])

    def to_json(self) -> dict:
        return {"scenario": self.scenario.to_json(), "control": self.control,
                "queues": {str(q): v for q, v in self.queues.items()}, "timing": self.timing, "pause": self.pause}

    @classmethod
    def from_json(cls, d: dict) -> "Case":
        return cls(Scenario.from_json(d["scenario"]), d["control"], {int(q): v for q, v in d["queues"].items()},
                   d.get("timing", {}), d.get("pause"))


def _desc(src_region=0, src_offset=0, dst_region=0, dst_offset=0, length=0, flags=0, cookie=0, reserved=0) -> dict:
    return {"src_region": src_region, "src_offset": src_offset, "dst_region": dst_region, "dst_offset": dst_offset,
            "length": length, "flags": int(flags), "cookie": cookie, "reserved": reserved}


lengths = st.one_of(st.sampled_from(BOUNDARY_LENGTHS), st.integers(0, 9000))
flag_sets = st.sets(st.sampled_from([Flag.NOTIFY, Flag.FENCE])).map(lambda s: int(sum(s)))


@st.composite
def _item(draw, bus_errors: bool) -> tuple:
    """One descriptor of a queue, before layout: ("copy", length, flags) | ("imm", value, flags) | ("error", kind, flags)."""
    kind = draw(st.sampled_from(["copy"] * 6 + ["imm"] * 2 + ["error"]))
    flags = draw(flag_sets)
    if kind == "copy":
        return ("copy", draw(lengths), flags)
    if kind == "imm":
        return ("imm", draw(st.integers(0, (1 << 64) - 1)), flags)
    kinds = [k for k in ERROR_KINDS if bus_errors or not k.startswith("BUS_ERROR")]
    return ("error", draw(st.sampled_from(kinds)), flags)


@st.composite
def _queue_plan(draw, q: int, max_descriptors: int, safe: bool, bus_errors: bool) -> dict:
    items = draw(st.lists(_item(bus_errors), min_size=0, max_size=max_descriptors))
    # Bus bases of the regions: mostly 8-aligned (so IMMs land), sometimes any byte (IMMs then halt with
    # MISALIGNED, alignment being by bus address; copies straddle bus words), unless `safe`.
    aligned = st.sampled_from([0, 8, 16])
    skew = aligned if safe else st.one_of(aligned, st.integers(0, 15))
    return {
        "items": items,
        "src_skew": draw(st.integers(0, 15)),
        "dst_skew": draw(skew),
        "sig_skew": draw(skew),
        "sig_base": 8 * draw(st.integers(0, 7)),  # first IMM's offset: with the skew, IMMs straddle bus words
        "src_offsets": draw(st.lists(st.integers(0, SRC_SIZE), min_size=len(items), max_size=len(items))),
        "gaps": draw(st.lists(st.integers(0, 70), min_size=len(items), max_size=len(items))),
        "exact": draw(st.booleans()),  # region sizes end exactly at the last byte written
        "start": draw(st.one_of(st.integers(0, 1000), st.integers((1 << 32) - 20, (1 << 32) + 20),
                                st.integers(0, (1 << 62)))),
    }


def _layout(q: int, plan: dict) -> tuple[list[BufferSpec], list[dict], dict]:
    """Buffers, region steps and descriptors for queue q's plan."""
    rs, rd, rsig = 3 * q, 3 * q + 1, 3 * q + 2
    descs, dst_end, sig_end = [], 0, plan.get("sig_base", 0)
    for i, (kind, value, flags) in enumerate(plan["items"]):
        gap = plan["gaps"][i]
        if kind == "copy":
            n = value
            so = min(plan["src_offsets"][i], SRC_SIZE - n) if n <= SRC_SIZE else 0
            n = min(n, SRC_SIZE)
            do = dst_end + gap
            descs.append(_desc(rs, so, rd, do, n, flags, cookie=i))
            dst_end = do + n
        elif kind == "imm":
            descs.append(_desc(0, value, rsig, sig_end, 8, flags | Flag.IMM, cookie=i))
            sig_end += 8
        else:
            descs.append(_error_desc(value, flags, i, rs, rd, rsig, dst_end, gap))
    dst_size = max(dst_end, 1) if plan["exact"] else dst_end + 256
    sig_size = max(sig_end, 8) if plan["exact"] else sig_end + 64
    buffers = [
        BufferSpec(f"src{q}", SRC_SIZE + plan["src_skew"] + GUARD),
        BufferSpec(f"dst{q}", GUARD + plan["dst_skew"] + dst_size + GUARD, "byte", GUARD_BYTE),
        BufferSpec(f"sig{q}", GUARD + plan["sig_skew"] + sig_size + GUARD, "byte", 0),
    ]
    regions = [
        {"op": "region", "id": rs, "buffer": f"src{q}", "offset": plan["src_skew"], "size": SRC_SIZE,
         "perms": int(Perm.READ)},
        {"op": "region", "id": rd, "buffer": f"dst{q}", "offset": GUARD + plan["dst_skew"], "size": dst_size,
         "perms": int(Perm.READ | Perm.WRITE)},
        {"op": "region", "id": rsig, "buffer": f"sig{q}", "offset": GUARD + plan["sig_skew"], "size": sig_size,
         "perms": int(Perm.WRITE)},
    ]
    return buffers, regions, descs


def _error_desc(kind: str, flags: int, i: int, rs: int, rd: int, rsig: int, dst_end: int, gap: int) -> dict:
    """A descriptor that fails with `kind` (dst offsets past dst_end so a partial write shows)."""
    do = dst_end + gap
    if kind == "INVALID_DESCRIPTOR":
        return _desc(rs, 0, rd, do, 16, flags | 0x80, cookie=i)
    if kind == "BAD_LENGTH":
        return _desc(0, 0x1234, rsig, 0, 4, flags | Flag.IMM, cookie=i)
    if kind == "MISALIGNED":
        return _desc(0, 0x1234, rsig, 4, 8, flags | Flag.IMM, cookie=i)
    if kind == "UNKNOWN_REGION":
        return _desc(UNREGISTERED_REGION, 0, rd, do, 16, flags, cookie=i)
    if kind == "PERMISSION":
        return _desc(rs, 0, rs, 64, 16, flags, cookie=i)  # the source region has no WRITE
    if kind == "OUT_OF_BOUNDS":
        return _desc(rs, SRC_SIZE - 8, rd, do, 16, flags, cookie=i)
    if kind == "OVERLAP":
        return _desc(rd, do, rd, do + 4, 16, flags, cookie=i)
    if kind == "BUS_ERROR_WRITE":
        return _desc(rs, 0, HOLE_REGION, 0, 300, flags, cookie=i)
    return _desc(HOLE_REGION, 0, rd, do, 300, flags, cookie=i)  # BUS_ERROR_READ


def plan(items: list[tuple], *, src_skew: int = 0, dst_skew: int = 0, sig_skew: int = 0, sig_base: int = 0,
         exact: bool = False,
         start: int = 0, src_offsets: list[int] | None = None, gaps: list[int] | None = None) -> dict:
    """A queue's plan written by hand (named regression scenarios): items as _item draws them."""
    return {"items": list(items), "src_skew": src_skew, "dst_skew": dst_skew, "sig_skew": sig_skew,
            "sig_base": sig_base, "exact": exact,
            "start": start, "src_offsets": src_offsets or [0] * len(items), "gaps": gaps or [0] * len(items)}


def build_case(plans: dict[int, dict], *, order: list[int] | None = None, control: dict | None = None,
               timing: dict | None = None, pause: dict | None = None, bus_errors: bool = True,
               name: str = "generated") -> Case:
    """The Case for per-queue plans: buffers, regions, queue set-up, posts in `order`, the control event
    ({"kind": "disable", "queue": q, "after": n} or {"kind": "reset", "after": n}) and a final wait."""
    control = control or {"kind": "none"}
    buffers = [BufferSpec("completions", GEOMETRY["num_queues"] * COMPLETION_STRIDE, "byte", 0)]
    steps: list[dict] = [{"op": "region", "id": COMPLETION_REGION, "buffer": "completions", "offset": 0,
                          "size": GEOMETRY["num_queues"] * COMPLETION_STRIDE, "perms": int(Perm.WRITE)}]
    if bus_errors:
        steps.append({"op": "region_hole", "id": HOLE_REGION, "size": 1 << 16, "perms": int(Perm.READ | Perm.WRITE)})
    queues = {}
    for q, p in plans.items():
        bufs, regions, descs = _layout(q, p)
        buffers += bufs
        steps += regions
        queues[q] = {"start": p["start"], "descriptors": descs}
    for q in plans:
        steps.append({"op": "configure", "queue": q, "region": COMPLETION_REGION, "offset": q * COMPLETION_STRIDE,
                      "start": queues[q]["start"]})
        steps.append({"op": "enable", "queue": q})
    for q in order or list(plans):
        steps.append({"op": "post", "queue": q, "descriptors": queues[q]["descriptors"]})
    if control["kind"] != "none":
        steps.append({"op": "advance", "n": control["after"]})
        steps.append({"op": "disable", "queue": control["queue"]} if control["kind"] == "disable" else {"op": "reset"})
    steps.append({"op": "wait_idle"})
    timing = timing or {"read_latency_ns": 1770.0, "write_latency_ns": 1770.0}
    return Case(Scenario(name, buffers, steps, **GEOMETRY), control, queues, timing, pause)


@st.composite
def cases(draw, max_queues: int = 3, max_descriptors: int = 12, safe: bool = False, bus_errors: bool = True) -> Case:
    """A generated Case. `safe` keeps to the plainest cases (8-aligned bus bases, no bus errors, no reset in
    flight): for a first look at a new engine. `bus_errors` False: no region over unbacked
    memory (for engines without Capability.BUS_ERRORS)."""
    bus_errors = bus_errors and not safe
    nq = draw(st.integers(1, max_queues))
    plans = {q: draw(_queue_plan(q, max_descriptors, safe, bus_errors)) for q in range(nq)}
    order = draw(st.permutations(list(plans)))
    kind = draw(st.sampled_from(["none", "disable"] + ([] if safe else ["reset"])))
    control: dict = {"kind": kind}
    if kind != "none":
        control["after"] = draw(st.integers(0, 8))
        if kind == "disable":
            control["queue"] = draw(st.sampled_from(sorted(plans)))
    timing = {"read_latency_ns": draw(st.sampled_from(READ_LATENCIES_NS)),
              "write_latency_ns": draw(st.sampled_from(WRITE_LATENCIES_NS))}
    pause = draw(st.one_of(st.none(), st.builds(lambda p, s: {"kind": "random", "probability": p, "seed": s},
                                                st.sampled_from([0.1, 0.3, 0.6]), st.integers(0, 1 << 16))))
    return build_case(plans, order=list(order), control=control, timing=timing, pause=pause, bus_errors=bus_errors)
