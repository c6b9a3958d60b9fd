"""Hypothesis drives the public Python API with hostile sequences of calls on the reference and the
software engine: sizes, addresses, region and queue ids, descriptors, orders of calls, use after close.

Every call either works or raises one of the documented errors (ArkdmaError, ValueError, TypeError);
nothing crashes or hangs (every wait is bounded); and no byte of any buffer changes unless a region
with WRITE permission covered it at some point. CI runs a bounded, derandomized set; `-m slow` runs
10,000 cases per engine.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("hypothesis", reason="the test extra is not installed: pip install 'arkdma[test]' (or ./dev)")

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule  # noqa: E402

from driver.abi import Flag, Perm
from driver.descriptor import Descriptor
from driver.device import Device
from driver.errors import ArkdmaError
from driver.reference_engine import ReferenceEngine

ALLOWED = (ArkdmaError, ValueError, TypeError)
NUM_REGIONS, NUM_QUEUES, SLOTS = 8, 4, 16

hostile_ints = st.one_of(
    st.integers(-2, 70_000),
    st.sampled_from([2**31, 2**32 - 1, 2**32, 2**48 + 1, 2**63, 2**64 - 1, 2**64, 2**64 + 4096, -(2**63)]),
)
hostile_values = st.one_of(hostile_ints, st.floats(allow_nan=True), st.none(), st.text(max_size=3), st.booleans())
small_sizes = st.integers(1, 16_384)
# sizes alloc must refuse (a valid 4 GiB alloc would only test this machine's memory)
refused_sizes = st.one_of(
    st.sampled_from([0, -1, 2**48 + 1, 2**63, 2**64, 2**64 + 4096, -(2**63)]),
    st.floats(allow_nan=True), st.none(), st.text(max_size=3), st.booleans(),
)


def _open_engine(name: str):
    if name == "reference":
        return ReferenceEngine(num_queues=NUM_QUEUES, slots=SLOTS, num_regions=NUM_REGIONS)
    from host.engine import SoftwareEngine

    return SoftwareEngine("host", num_queues=NUM_QUEUES, slots=SLOTS, num_regions=NUM_REGIONS)


class ApiMachine(RuleBasedStateMachine):
    engine_name = "reference"

    @initialize()
    def open(self):
        self.dev = Device(_open_engine(self.engine_name))
        self.closed = False
        self.buffers: list[list] = []  # [buffer, last seen bytes, may-change mask]
        self.regions: dict[int, tuple[int, int, int, Perm]] = {}  # id -> (buffer index, offset, size, perms)
        self.queues: dict[int, object] = {}

    def teardown(self):
        if hasattr(self, "dev"):
            self.dev.close()

    def attempt(self, call):
        try:
            return call()
        except ALLOWED:
            return None

    # --- memory ------------------------------------------------------------------------
    @rule(size=st.one_of(small_sizes, refused_sizes), placement=st.sampled_from(["host", "device", "gpu", None]))
    def alloc(self, size, placement):
        buf = self.attempt(lambda: self.dev.alloc(size, placement))
        if buf is not None:
            assert not self.closed, "alloc worked after close"
            assert buf.size == size
            pattern = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
            buf.write(0, pattern)
            self.buffers.append([buf, pattern, np.zeros(size, bool)])

    @precondition(lambda self: self.buffers)
    @rule(data=st.data(), perms=st.one_of(st.sampled_from([Perm.READ, Perm.WRITE, Perm.READ | Perm.WRITE]),
                                          hostile_ints),
          region=st.one_of(st.none(), hostile_ints))
    def register(self, data, perms, region):
        index = data.draw(st.integers(0, len(self.buffers) - 1))
        buf = self.buffers[index][0]
        offset = data.draw(st.one_of(st.integers(0, buf.size), hostile_values))
        size = data.draw(st.one_of(st.none(), st.integers(0, buf.size), hostile_values))
        handle = self.attempt(lambda: self.dev.register(buf, offset=offset, size=size, perms=perms, region=region))
        if handle is not None:
            assert not self.closed
            assert 0 <= handle.id < NUM_REGIONS and handle.id not in self.dev.regions.internal_ids
            assert buf.addr <= handle.addr and handle.addr + handle.size <= buf.addr + buf.size
            self.regions[handle.id] = (index, handle.addr - buf.addr, handle.size, handle.perms)
            if handle.perms & Perm.WRITE:
                self.buffers[index][2][handle.addr - buf.addr : handle.addr - buf.addr + handle.size] = True

    @rule(addr=hostile_ints, size=hostile_values)
    def register_address(self, addr, size):
        handle = self.attempt(lambda: self.dev.regions.register(addr=addr, size=size, perms=Perm.WRITE))
        if handle is None:
            return
        owner = next((i for i, (b, _, _) in enumerate(self.buffers)
                      if b.addr <= handle.addr and handle.addr + handle.size <= b.addr + b.size), None)
        if self.engine_name != "reference":
            assert owner is not None, f"a raw address {addr:#x} was registered on {self.engine_name}"
        if owner is not None:
            b = self.buffers[owner]
            b[2][handle.addr - b[0].addr : handle.addr - b[0].addr + handle.size] = True
            self.regions[handle.id] = (owner, handle.addr - b[0].addr, handle.size, handle.perms)

    @rule(region=st.one_of(st.integers(0, NUM_REGIONS), hostile_values))
    def unregister(self, region):
        self.attempt(lambda: self.dev.regions.unregister(region))
        if isinstance(region, int) and not isinstance(region, bool):
            live = {h.id for h in self.dev.regions} if not self.closed else set()
            if region not in live:
                self.regions.pop(region, None)

    @precondition(lambda self: self.buffers)
    @rule(data=st.data())
    def free_or_view(self, data):
        buf = self.buffers[data.draw(st.integers(0, len(self.buffers) - 1))][0]
        if data.draw(st.booleans()) and hasattr(buf, "view"):
            view = self.attempt(buf.view)
            if view is not None:
                assert int(view[: min(8, buf.size)].sum()) >= 0
        elif hasattr(buf, "free"):
            self.attempt(buf.free)

    # --- queues ------------------------------------------------------------------------
    @rule(queue=st.one_of(st.none(), st.integers(0, NUM_QUEUES), hostile_values), start=st.one_of(
        st.just(0), st.integers(0, 2**40), hostile_values))
    def open_queue(self, queue, start):
        q = self.attempt(lambda: self.dev.queue(queue, start=start))
        if q is not None:
            assert not self.closed
            self.queues[q.id] = q

    @precondition(lambda self: self.queues)
    @rule(data=st.data())
    def post_and_wait(self, data):
        q = self.queues[data.draw(st.sampled_from(sorted(self.queues)))]
        ids = st.one_of(st.sampled_from(sorted(self.regions) or [0]), st.integers(0, 2**16 - 1))
        descriptor = st.builds(
            Descriptor,
            src_region=ids, src_offset=st.integers(0, 20_000), dst_region=ids, dst_offset=st.integers(0, 20_000),
            length=st.one_of(st.integers(0, 9_000), st.just(8)),
            flags=st.sampled_from([0, Flag.NOTIFY, Flag.FENCE, Flag.IMM, Flag.IMM | Flag.NOTIFY, 0x80]),
            cookie=st.integers(0, 2**32 - 1),
        )
        batch = data.draw(st.lists(descriptor, min_size=1, max_size=2 * SLOTS))
        ticket = self.attempt(lambda: q.post(batch, timeout=2.0))
        if ticket is not None:
            self.attempt(lambda: q.wait(ticket, timeout=2.0))

    @precondition(lambda self: self.queues)
    @rule(data=st.data())
    def stop_queue(self, data):
        qid = data.draw(st.sampled_from(sorted(self.queues)))
        self.attempt(self.queues.pop(qid).stop)

    @rule()
    def close(self):
        self.attempt(self.dev.close)
        self.closed = True

    # --- what must always hold ------------------------------------------------------------
    @invariant()
    def nothing_written_outside_writable_regions(self):
        if not hasattr(self, "dev"):
            return
        if self.engine_name != "reference":
            # a software engine is asynchronous: let it finish what it took before looking
            self.attempt(lambda: self.dev.backend.wait_idle(timeout=2.0))
        for entry in self.buffers:
            buf, seen, may_change = entry
            now = self.attempt(lambda: buf.read(0, buf.size))
            if now is None:
                continue  # freed or closed: nothing to look at any more
            changed = np.frombuffer(now, np.uint8) != np.frombuffer(seen, np.uint8)
            stray = np.flatnonzero(changed & ~may_change)
            assert not stray.size, f"bytes {stray[:8].tolist()} of a {buf.size}-byte buffer changed outside any writable region"
            entry[1] = now


class ReferenceApi(ApiMachine):
    engine_name = "reference"


class SoftwareHostApi(ApiMachine):
    engine_name = "software-host"


def _settings(examples: int) -> settings:
    return settings(max_examples=examples, stateful_step_count=25, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


CI_EXAMPLES = int(os.environ.get("ARKDMA_FUZZ_EXAMPLES", "60"))


def _software_available() -> str | None:
    from host import native

    return native.unavailable_reason()


def test_api_fuzz_reference():
    ReferenceApi.TestCase.settings = _settings(CI_EXAMPLES)
    ReferenceApi.TestCase().runTest()


def test_api_fuzz_software_host():
    if _software_available():
        pytest.skip(_software_available())
    SoftwareHostApi.TestCase.settings = _settings(CI_EXAMPLES)
    SoftwareHostApi.TestCase().runTest()


@pytest.mark.slow
@pytest.mark.parametrize("machine", [ReferenceApi, SoftwareHostApi], ids=["reference", "software-host"])
def test_api_fuzz_campaign(machine):
    if machine is SoftwareHostApi and _software_available():
        pytest.skip(_software_available())
    machine.TestCase.settings = settings(_settings(10_000), derandomize=False)
    machine.TestCase().runTest()
