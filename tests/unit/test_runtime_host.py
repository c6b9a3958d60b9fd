"""The runtime's host path without a GPU: the package's names, the control block's views, waiting for `done` (spin,
yield, sleep, timeout, fault) against a fake control word and clock, fault records as messages, the go path's choice
and its fall-back to the host, the resident kernel's halt, relaunch and exit handling with stand-in streams, the
publish option, the kernel's words the host names, and the arguments run/wait/stop/suspend refuse."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ark_runtime.kernel.codes import FAULT_NAMES, GRAPH_WAIT_TIMEOUT, RELAUNCH_FAILED, RING, Fault
from ark_runtime.kernel.codegen import INCLUDE_DIR
from ark_runtime.kernel.records import CONTROL_DTYPE
from ark_runtime.model import Model
from ark_runtime.plan import build_plan
from ark_runtime.runtime import control, go, resident
from ark_runtime.runtime.control import ControlBlock, Waited
from ark_runtime.runtime.faults import FaultRecord, LoopError, fault_message

DEVICE_PTR = 0x7F00_0000_0000


def _block() -> ControlBlock:
    return ControlBlock(np.zeros(CONTROL_DTYPE.itemsize, np.uint8), DEVICE_PTR)


# --- the package --------------------------------------------------------------------------------------------
def test_the_package_keeps_the_names_tests_bench_and_examples_import():
    import ark_runtime.runtime as pkg
    from ark_runtime.runtime import (GRAPH_LAUNCHES_PER_RUN, LoopError, LoopFault, LoopTimeout, Runtime,
                                     TransferReport, graph_copies_unavailable)
    from ark_runtime.runtime import copy_paths, faults, runtime

    assert Runtime is runtime.Runtime and TransferReport is runtime.TransferReport
    assert (LoopError, LoopFault, LoopTimeout) == (faults.LoopError, faults.LoopFault, faults.LoopTimeout)
    assert issubclass(LoopFault, LoopError) and issubclass(LoopTimeout, LoopError)
    assert graph_copies_unavailable is copy_paths.graph_copies_unavailable
    assert GRAPH_LAUNCHES_PER_RUN == 118
    assert set(pkg.__all__) <= set(dir(pkg))


def test_every_module_of_the_package_says_what_it_holds():
    from pathlib import Path

    import ark_runtime.runtime as pkg

    for path in sorted(Path(pkg.__file__).parent.glob("*.py")):
        text = path.read_text()
        assert text.startswith('"""') and len(text.splitlines()[0]) > 20, f"{path.name}: no first-line docstring"


# --- the control block --------------------------------------------------------------------------------------
def test_control_block_views_are_the_record_fields():
    cb = _block()
    cb.go[0], cb.stop[0], cb.done[0], cb.fault[0] = 7, 1, 5, 3
    rec = cb.record[0]
    assert (int(rec["go"]), int(rec["stop"]), int(rec["done"]), int(rec["fault"])) == (7, 1, 5, 3)
    cb.record["done"] = 9
    assert cb.iterations_done() == 9 and cb.faulted()
    assert cb.go_device_ptr == DEVICE_PTR + CONTROL_DTYPE.fields["go"][1]


@pytest.mark.parametrize("buf", [np.zeros(CONTROL_DTYPE.itemsize - 1, np.uint8),
                                 np.zeros(CONTROL_DTYPE.itemsize // 8, np.uint64)])
def test_control_block_refuses_a_buffer_of_another_size_or_type(buf):
    with pytest.raises(LoopError, match=f"a control block is {CONTROL_DTYPE.itemsize} bytes"):
        ControlBlock(buf, DEVICE_PTR)


class FakeTime:
    """A clock that moves by `tick` per reading (a poll's cost), by `yield_s` per yield and by what is slept;
    `events` set `done` or `fault` once the clock passes their time."""

    def __init__(self, cb: ControlBlock, tick: float = 1e-6, yield_s: float = 5e-6):
        self.cb, self.t, self.tick, self.yield_s = cb, 0.0, tick, yield_s
        self.events: list[tuple[float, str, int]] = []
        self.yields = 0
        self.sleeps: list[float] = []
        self.first_yield = self.first_sleep = None

    def _advance(self, dt: float) -> None:
        self.t += dt
        for at, word, value in self.events:
            if self.t >= at:
                getattr(self.cb, word)[0] = value

    def clock(self) -> float:
        self._advance(self.tick)
        return self.t

    def yield_core(self) -> None:
        self.yields += 1
        self.first_yield = self.t if self.first_yield is None else self.first_yield
        self._advance(self.yield_s)

    def sleep(self, s: float) -> None:
        assert s > 0
        self.sleeps.append(s)
        self.first_sleep = self.t if self.first_sleep is None else self.first_sleep
        self._advance(s)

    def wait(self, target: int, timeout: float) -> Waited:
        return self.cb.wait_done(target, timeout, clock=self.clock, yield_core=self.yield_core, sleep=self.sleep)


def test_a_short_wait_only_spins():
    cb = _block()
    ft = FakeTime(cb)
    ft.events.append((control.SPIN_S / 2, "done", 3))
    assert ft.wait(3, timeout=1.0) is Waited.DONE
    assert ft.yields == 0 and ft.sleeps == [] and ft.t < control.SPIN_S


def test_a_longer_wait_yields_the_core_after_the_spin():
    cb = _block()
    ft = FakeTime(cb)
    ft.events.append(((control.SPIN_S + control.YIELD_S) / 2, "done", 1))
    assert ft.wait(1, timeout=1.0) is Waited.DONE
    assert ft.yields > 0 and ft.sleeps == [] and ft.first_yield >= control.SPIN_S


def test_a_long_wait_sleeps_doubling_up_to_the_longest_nap():
    cb = _block()
    ft = FakeTime(cb)
    ft.events.append((0.2, "done", 2))
    assert ft.wait(2, timeout=1.0) is Waited.DONE
    assert ft.first_sleep >= control.YIELD_S and ft.sleeps[0] == control.NAP_FIRST_S
    assert all(b == min(2 * a, control.NAP_MAX_S) for a, b in zip(ft.sleeps, ft.sleeps[1:]))
    assert max(ft.sleeps) == control.NAP_MAX_S
    assert ft.t - 0.2 <= control.NAP_MAX_S + 1e-5  # seen within one nap of landing


def test_a_fault_ends_the_wait():
    cb = _block()
    ft = FakeTime(cb)
    ft.events.append((0.05, "fault", int(Fault.BAD_INDEX)))
    assert ft.wait(10, timeout=1.0) is Waited.FAULT
    assert ft.t < 0.05 + control.NAP_MAX_S + 1e-5


def test_a_timeout_never_sleeps_past_the_deadline():
    cb = _block()
    ft = FakeTime(cb)
    assert ft.wait(1, timeout=0.0371) is Waited.TIMEOUT
    assert 0.0371 <= ft.t <= 0.0371 + 2e-5


def test_done_already_there_returns_at_once():
    cb = _block()
    cb.done[0] = 50
    ft = FakeTime(cb)
    assert ft.wait(50, timeout=1e-9) is Waited.DONE and ft.t <= 1e-6


@settings(max_examples=200, deadline=None)
@given(done_at=st.floats(0, 0.5), fault_at=st.none() | st.floats(0, 0.5), timeout=st.floats(1e-4, 0.4),
       target=st.integers(1, 2**63))
def test_a_wait_ends_by_the_first_of_done_fault_and_timeout(done_at, fault_at, timeout, target):
    """Whatever happens when: DONE if done landed first (by the deadline), FAULT if the fault did, else TIMEOUT; and
    the wait returns within a nap of whichever came first."""
    cb = _block()
    ft = FakeTime(cb)
    ft.events.append((done_at, "done", target))
    if fault_at is not None:
        ft.events.append((fault_at, "fault", 1))
    got = ft.wait(target, timeout)
    first = min(done_at, math.inf if fault_at is None else fault_at, timeout)
    slack = control.NAP_MAX_S + 2 * ft.yield_s + 2 * ft.tick
    assert ft.t <= first + slack
    if got is Waited.DONE:
        assert done_at <= ft.t and (fault_at is None or fault_at >= done_at - slack)
    elif got is Waited.FAULT:
        assert fault_at is not None and fault_at <= ft.t and ft.t <= timeout + slack
    else:
        assert ft.t >= timeout and done_at > timeout - slack


# --- how often `done` is published ------------------------------------------------------------------------------
def test_publish_option_is_absent_unless_the_variable_is_set(monkeypatch):
    monkeypatch.delenv(control.PUBLISH_EVERY_ENV, raising=False)
    assert control.publish_every_options() == ()
    monkeypatch.setenv(control.PUBLISH_EVERY_ENV, "")
    assert control.publish_every_options() == ()


@given(n=st.integers(-5, 2 * RING))
def test_publish_option_takes_1_to_ring_minus_1(n):
    import os

    os.environ[control.PUBLISH_EVERY_ENV] = str(n)
    try:
        if 1 <= n < RING:
            assert control.publish_every_options() == (f"-DARK_PUBLISH_EVERY={n}",)
        else:
            with pytest.raises(LoopError, match=f"ARK_PUBLISH_EVERY='{n}': give a whole number"):
                control.publish_every_options()
    finally:
        del os.environ[control.PUBLISH_EVERY_ENV]


@pytest.mark.parametrize("bad", ["x", "1.5", "16 ", "0x10", "-"])
def test_publish_option_refuses_what_is_not_a_count(monkeypatch, bad):
    monkeypatch.setenv(control.PUBLISH_EVERY_ENV, bad)
    if bad == "16 ":  # int() takes surrounding blanks: the count is 16
        assert control.publish_every_options() == ("-DARK_PUBLISH_EVERY=16",)
        return
    with pytest.raises(LoopError, match="ARK_PUBLISH_EVERY"):
        control.publish_every_options()


def test_the_kernel_builds_with_each_publish_cadence_and_refuses_one_past_the_ring():
    """loop.cuh's ARK_PUBLISH_EVERY: every 16th by default, every one when asked (another build), RING refused."""
    pytest.importorskip("cupy", reason="the gpu extra (CuPy, NVRTC) is not installed")
    from ark_runtime import models
    from ark_runtime.fusion import fuse
    from ark_runtime.kernel.codegen import generate
    from ark_runtime.scheduler import DeviceSpec
    from driver.gpu import compile

    m = fuse(models.named("chain64"))
    text = generate(m, build_plan(m, DeviceSpec(num_sms=132))).text
    sixteen = compile.cubin(text, extra=(f"-I{INCLUDE_DIR}",))
    every = compile.cubin(text, extra=(f"-I{INCLUDE_DIR}", "-DARK_PUBLISH_EVERY=1"))
    assert every[:4] == sixteen[:4] == b"\x7fELF" and every != sixteen
    assert sixteen == compile.cubin(text, extra=(f"-I{INCLUDE_DIR}", "-DARK_PUBLISH_EVERY=16"))
    with pytest.raises(compile.CompileError, match="ARK_PUBLISH_EVERY: 1 to RING - 1"):
        compile.cubin(text, extra=(f"-I{INCLUDE_DIR}", f"-DARK_PUBLISH_EVERY={RING}"))


def test_the_words_the_host_names_are_the_kernels():
    """resident.py's indices into `finished` are loop.cuh's."""
    text = (INCLUDE_DIR / "ark" / "loop.cuh").read_text()
    found = dict(re.findall(r"\b(GO_SEEN|STOP_SEEN|SEGMENT_AT) = RING \+ (\d)", text))
    assert {k: RING + int(v) for k, v in found.items()} == {"GO_SEEN": resident.GO_SEEN,
                                                           "STOP_SEEN": resident.STOP_SEEN,
                                                           "SEGMENT_AT": resident.SEGMENT_AT}
    assert re.search(r"atomicMax\(p\.finished \+ RING,", text) and resident.PUBLISHED == RING


def test_the_kernel_looks_for_a_stop_between_iterations_it_need_not_wait_for():
    """loop_kernel.cuh: an iteration that go lets start at once still looks for a stop (time-gated by the arrival
    stamp), so queued iterations do not keep a stopped kernel running."""
    text = (INCLUDE_DIR / "ark" / "loop_kernel.cuh").read_text()
    assert "stop = ark::stop_between(p, arrived_ns, next_stop_look);" in text
    assert "arrived_ns = ark::arrive(p, it, go);" in text
    loop = (INCLUDE_DIR / "ark" / "loop.cuh").read_text()
    body = loop[loop.index("bool stop_between("):]
    body = body[:body.index("\n}\n")]
    assert "if (now < next) return false;" in body and "host_stop(p)" in body and "blockIdx.x == 0" in body


# --- fault records ------------------------------------------------------------------------------------------
def _faulting_model():
    m = Model("w")
    x = m.input("x", (512, 1024), "fp32")
    m.output(m.softmax(m.matmul(x, m.input("w", (1024, 1024), "fp32"))))
    from ark_runtime.scheduler import DeviceSpec

    return m, build_plan(m, DeviceSpec(num_sms=8))


def _record(**kw) -> FaultRecord:
    base = {"code": 1, "sm": 7, "tile": 3, "counter": -1, "expected": 5, "observed": 4, "detail": 2_500_000}
    return FaultRecord(**{**base, **kw})


def test_fault_record_is_read_from_the_control_block():
    cb = _block()
    rec = cb.record[0]
    for name, value in (("fault", 2), ("fault_sm", 9), ("fault_tile", -1), ("fault_counter", 4),
                        ("fault_expected", 2**40), ("fault_observed", 3), ("fault_detail", 18)):
        rec[name] = value
    assert FaultRecord.from_control(cb.record[0]) == FaultRecord(2, 9, -1, 4, 2**40, 3, 18)


def test_a_timeout_names_the_tile_and_what_it_waited_for():
    m, plan = _faulting_model()
    tile_counter = next(c["id"] for c in plan.counters if c["kind"] == "tile")
    op_counter = next(c for c in plan.counters if c["kind"] == "op")
    waiter = next(i for i, t in enumerate(plan.tiles) if t["op"] == 1)
    msg = fault_message(_record(tile=waiter, counter=tile_counter), m, plan)
    awaited = plan.counters[tile_counter]["of"]
    assert msg.startswith(f"w: {FAULT_NAMES[Fault.TIMEOUT]} on SM 7 at tile {waiter} (op 1 softmax -> ")
    op = m.ops[plan.tiles[awaited]["op"]]
    rows = plan.tiles[awaited]["writes"][1:3]
    assert (f"waited 2.5 ms for tile {awaited} (op {op.id} {op.fn} -> {m.tensors[op.output].name}, rows "
            f"{rows[0]}:{rows[1]}) to reach 5 (it read 4); the kernel stopped") in msg
    msg = fault_message(_record(tile=waiter, counter=op_counter["id"]), m, plan)
    assert f"for every tile of op {op_counter['of']} to reach 5" in msg
    msg = fault_message(_record(counter=10_000), m, plan)
    assert "counter 10000 to reach 5" in msg


def test_each_fault_code_reads_as_what_it_means():
    m, plan = _faulting_model()
    assert "row 16 holds an id outside the table" in fault_message(_record(code=Fault.BAD_INDEX, detail=17), m, plan)
    dma = fault_message(_record(code=Fault.DMA, detail=3), m, plan, dma_status=lambda: "queue 0: TIMEOUT at POST")
    assert "DMA on SM 7" in dma and "device code 3: queue 0: TIMEOUT at POST" in dma
    assert "device code 3: no queue" in fault_message(_record(code=Fault.DMA, detail=3), m, plan)
    graph = fault_message(_record(code=Fault.GRAPH, detail=GRAPH_WAIT_TIMEOUT), m, plan)
    assert "DEVICE_GRAPH" in graph and "had not finished when the budget" in graph
    assert "tail launch" in fault_message(_record(code=Fault.GRAPH, detail=RELAUNCH_FAILED + 700), m, plan)
    assert "device-side launch of the copy's graph failed" in fault_message(_record(code=Fault.GRAPH, detail=2), m,
                                                                             plan)
    assert "STOPPED on SM 7" in fault_message(_record(code=Fault.STOPPED, detail=0), m, plan)
    odd = fault_message(_record(code=99, tile=-1, detail=12), m, plan)
    assert "code 99 on SM 7 at tile -1 (no tile): detail 12; the kernel stopped" in odd
    assert "(no tile)" in fault_message(_record(code=2, tile=len(plan.tiles)), m, plan)


# --- the go path ------------------------------------------------------------------------------------------------
class FakeOps:
    def __init__(self, can=True, rcs=()):
        self.can, self.rcs, self.writes = can, list(rcs), []

    def can_write_64(self, device_id):
        return self.can

    def write64(self, stream_ptr, address, value):
        self.writes.append((stream_ptr, address, value))
        return self.rcs.pop(0) if self.rcs else 0

    def error_name(self, rc):
        return f"CUDA_ERROR_{rc}"


class FakeStream:
    def __init__(self, ptr, log):
        self.ptr, self.log = ptr, log

    def synchronize(self):
        self.log.append(("sync go stream", self.ptr))


class FakeCuda:
    """Stand-in CUDA calls: `busy` holds the streams with work queued (the go stream is 0xA0)."""

    Error = RuntimeError

    def __init__(self, callers=(0,), fail_order=False, busy=None):
        self.log, self.callers, self.fail_order, self.asked = [], list(callers), fail_order, []
        self.busy = set(self.callers) if busy is None else set(busy)

    def idle(self, ptr):
        return ptr not in self.busy

    def new_stream(self):
        return FakeStream(0xA0, self.log)

    def new_event(self):
        return object()

    def order_after(self, stream, event, ptr):
        if self.fail_order:
            raise RuntimeError("cudaErrorIllegalAddress")
        self.log.append(("wait", ptr))

    def synchronize(self, ptr):
        self.log.append(("sync", ptr))

    def set_device(self, device_id):
        self.log.append(("set device", device_id))

    def caller_streams(self, device_id):
        self.asked.append(device_id)
        return self.callers


def test_go_path_host_when_asked_without_loading_the_driver(monkeypatch):
    monkeypatch.setenv(go.GO_PATH_ENV, "host")

    def never():
        raise AssertionError("loaded")
    assert go.stream_ops(0, never) == (None, "ARK_GO_PATH=host")


@pytest.mark.parametrize("bad", ["pigeon", "HOST", " stream"])
def test_go_path_refuses_an_unknown_choice(monkeypatch, bad):
    monkeypatch.setenv(go.GO_PATH_ENV, bad)
    with pytest.raises(LoopError, match=f"ARK_GO_PATH='{bad}': give one of auto, stream, host"):
        go.stream_ops(0, FakeOps)


def test_go_path_says_why_not_the_stream(monkeypatch):
    monkeypatch.setenv(go.GO_PATH_ENV, "auto")

    def missing():
        raise go.StreamOpsUnavailable("the CUDA driver has no cuStreamWriteValue64")
    assert go.stream_ops(0, missing) == (None, "the CUDA driver has no cuStreamWriteValue64")
    ops, why = go.stream_ops(3, lambda: FakeOps(can=False))
    assert ops is None and "GPU 3 cannot write 64-bit values" in why and "CAN_USE_64_BIT_STREAM_MEM_OPS" in why
    ops, why = go.stream_ops(0, FakeOps)
    assert isinstance(ops, FakeOps) and why == ""


def test_the_driver_library_loads_or_says_why_not():
    try:
        ops = go.StreamMemOps()
    except go.StreamOpsUnavailable as exc:
        assert "libcuda" in str(exc) or "cuStreamWriteValue64" in str(exc)
    else:
        assert callable(ops.write64)


def test_go_on_the_stream_waits_for_each_caller_stream_then_writes(monkeypatch):
    monkeypatch.setenv(go.GO_PATH_ENV, "auto")
    cb, ops, cuda = _block(), FakeOps(), FakeCuda(callers=(0, 0x51))
    sig = go.GoSignal(cb, 0, lambda: ops, cuda)
    assert sig.path == "auto" and sig.reason == ""
    assert ops.writes == [(0xA0, cb.go_device_ptr, 0)]  # the first write proves the call
    cuda.log.clear()
    sig.write(5)
    assert cuda.log == [("wait", 0), ("wait", 0x51)] and ops.writes[-1] == (0xA0, cb.go_device_ptr, 5)
    assert int(cb.go[0]) == 0 and sig.writes == {"stream": 1, "host": 0}  # the GPU writes it, not the host


@pytest.mark.parametrize("busy", [(), (0x51,), (0xA0,), (0, 0x51, 0xA0)])
def test_go_from_the_host_only_while_every_stream_is_idle(monkeypatch, busy):
    """auto: nothing queued on the caller's streams and no write of go still to land: the host writes it (no GPU
    command latency); any of them busy: the stream write, in GPU order."""
    monkeypatch.setenv(go.GO_PATH_ENV, "auto")
    cb, ops, cuda = _block(), FakeOps(), FakeCuda(callers=(0, 0x51), busy=busy)
    sig = go.GoSignal(cb, 0, lambda: ops, cuda)
    written = len(ops.writes)
    cuda.log.clear()
    sig.write(6)
    if not busy:
        assert int(cb.go[0]) == 6 and len(ops.writes) == written and cuda.log == []
        assert sig.writes == {"stream": 0, "host": 1}
    else:
        assert int(cb.go[0]) == 0 and ops.writes[-1][2] == 6 and ("wait", 0x51) in cuda.log
        assert sig.writes == {"stream": 1, "host": 0}


def test_go_always_on_the_stream_when_asked(monkeypatch):
    monkeypatch.setenv(go.GO_PATH_ENV, "stream")
    cb, ops, cuda = _block(), FakeOps(), FakeCuda(busy=())
    sig = go.GoSignal(cb, 0, lambda: ops, cuda)
    sig.write(2)
    assert sig.path == "stream" and ops.writes[-1][2] == 2 and int(cb.go[0]) == 0


def test_a_failed_stream_write_falls_back_to_the_host_for_good(monkeypatch):
    monkeypatch.setenv(go.GO_PATH_ENV, "auto")
    cb, ops, cuda = _block(), FakeOps(rcs=[0, 0, 999]), FakeCuda(callers=(0x51,))
    sig = go.GoSignal(cb, 0, lambda: ops, cuda)
    sig.write(1)
    cuda.log.clear()
    sig.write(3)
    # the go stream's earlier writes land first, then the caller's stream is synchronized and the host writes
    assert cuda.log == [("wait", 0x51), ("sync go stream", 0xA0), ("sync", 0x51)]
    assert sig.path == "host" and sig.reason == "cuStreamWriteValue64 failed with CUDA_ERROR_999"
    assert int(cb.go[0]) == 3 and sig.writes == {"stream": 1, "host": 1}
    writes = len(ops.writes)
    sig.write(4)
    assert len(ops.writes) == writes and int(cb.go[0]) == 4


def test_a_failed_first_write_or_ordering_takes_the_host_path(monkeypatch):
    monkeypatch.setenv(go.GO_PATH_ENV, "auto")
    sig = go.GoSignal(_block(), 0, lambda: FakeOps(rcs=[801]), FakeCuda())
    assert sig.path == "host" and "CUDA_ERROR_801" in sig.reason
    cb = _block()
    sig = go.GoSignal(cb, 0, FakeOps, FakeCuda(fail_order=True))
    sig.write(2)
    assert sig.path == "host" and "ordering the go stream" in sig.reason and int(cb.go[0]) == 2


def test_a_thread_without_a_current_context_gets_one_and_writes(monkeypatch):
    monkeypatch.setenv(go.GO_PATH_ENV, "auto")
    ops, cuda = FakeOps(rcs=[go.CUDA_ERROR_INVALID_CONTEXT, 0]), FakeCuda()
    sig = go.GoSignal(_block(), 2, lambda: ops, cuda)
    assert sig.path == "auto" and ("set device", 2) in cuda.log and len(ops.writes) == 2


def test_go_on_the_host_synchronizes_the_callers_first(monkeypatch):
    monkeypatch.setenv(go.GO_PATH_ENV, "host")
    cb, cuda = _block(), FakeCuda(callers=(0, 0x77))
    sig = go.GoSignal(cb, 3, FakeOps, cuda)
    sig.write(9)
    assert sig.path == "host" and cuda.log == [("sync", 0), ("sync", 0x77)] and int(cb.go[0]) == 9
    assert cuda.asked == [3]  # the runtime's GPU's current streams


# --- the resident kernel ----------------------------------------------------------------------------------------
class KernelStream:
    """Busy until `leaves_after` queries after the stop word went up (None: never)."""

    def __init__(self, cb, leaves_after=2, error=None):
        self.cb, self.leaves_after, self.error, self.queries, self.synced = cb, leaves_after, error, 0, 0

    @property
    def done(self):
        if self.error:
            raise self.error
        if int(self.cb.stop[0]):
            self.queries += 1
        return self.leaves_after is not None and self.queries > self.leaves_after

    def synchronize(self):
        self.synced += 1


class Finished:
    def __init__(self):
        self.words = np.arange(RING + 4, dtype=np.uint64) + 100

    def get(self, stream=None):
        return self.words.copy()

    def set(self, words, stream=None):
        self.words = np.array(words)


@pytest.fixture
def registry():
    saved = set(resident._RESIDENT)
    resident._RESIDENT.clear()
    yield resident._RESIDENT
    resident._RESIDENT.clear()
    resident._RESIDENT.update(saved)


def _kernel(leaves_after=2, error=None, gates=None):
    cb = _block()
    starts = []
    k = resident.ResidentKernel("m", cb, KernelStream(cb, leaves_after, error), lambda: starts.append(1), Finished(),
                                keep=[], open_gates=gates)
    return k, cb, starts


def test_a_launched_kernel_is_resident_until_it_leaves(registry):
    k, cb, starts = _kernel()
    k.launch()
    assert starts == [1] and k.resident and resident.others_resident() == [k] and resident.others_resident(k) == []
    assert k.halt(1.0) and int(cb.stop[0]) == 1 and not k.resident and k.stream.synced == 1
    assert k.halt(1.0)  # again: nothing to wait for


def test_a_kernel_that_does_not_leave_stays_resident_and_its_gates_are_opened(registry):
    import time

    opened = []
    k, _, _ = _kernel(leaves_after=None, gates=lambda: opened.append(time.monotonic()))
    k.launch()
    t0 = time.monotonic()
    assert not k.halt(resident.OPEN_GATES_AFTER_S + 0.1)
    assert k.resident and len(opened) == 1 and opened[0] - t0 >= resident.OPEN_GATES_AFTER_S
    assert not k.halt_quietly(0.01)


def test_a_launch_that_fails_leaves_nothing_resident(registry):
    cb = _block()

    def broken():
        raise RuntimeError("launch failed")
    k = resident.ResidentKernel("m", cb, KernelStream(cb), broken, Finished(), keep=[])
    with pytest.raises(RuntimeError, match="launch failed"):
        k.launch()
    assert not k.resident


def test_halting_quietly_takes_any_error_as_unreachable(registry):
    k, _, _ = _kernel(error=ValueError("stream gone"))
    k.launch()
    assert k.halt_quietly(0.1) is False and k.resident
    with pytest.raises(ValueError):
        k.halt(0.1)


def test_a_lost_context_is_a_kernel_gone(registry):
    from cupy.cuda.runtime import CUDARuntimeError

    k, _, _ = _kernel(error=CUDARuntimeError(700))
    k.launch()
    with pytest.raises(CUDARuntimeError):
        k.halt(0.1)
    assert not k.resident


def test_relaunch_clears_the_stop_and_goes_on_from_the_iteration(registry):
    k, cb, starts = _kernel()
    k.launch()
    assert k.halt(1.0)
    before = k._finished.words.copy()
    k.relaunch(1234)
    words = k._finished.words
    assert words[resident.STOP_SEEN] == 0 and words[resident.SEGMENT_AT] == 1234
    keep = [i for i in range(RING + 4) if i not in (resident.STOP_SEEN, resident.SEGMENT_AT)]
    assert (words[keep] == before[keep]).all()  # slots, published and go as they were: counters only grow
    assert int(cb.stop[0]) == 0 and starts == [1, 1] and k.resident


def test_exit_halts_every_kernel_and_exits_at_once_if_one_stays(registry, capsys):
    gone, _, _ = _kernel()
    stuck, _, _ = _kernel(leaves_after=None)
    stuck.name = "stuck-model"
    gone.launch()
    stuck.launch()
    codes = []
    resident.INTERRUPT_GRACE_S, saved = 0.05, resident.INTERRUPT_GRACE_S
    try:
        resident.halt_all_at_exit(codes.append)
    finally:
        resident.INTERRUPT_GRACE_S = saved
    assert codes == [resident.EXIT_CODE_STUCK] and not gone.resident
    assert "the loop kernel of stuck-model did not leave" in capsys.readouterr().err


def test_exit_with_every_kernel_gone_does_not_exit_early(registry):
    k, _, _ = _kernel()
    k.launch()
    codes = []
    resident.halt_all_at_exit(codes.append)
    assert codes == [] and not k.resident


def test_the_exit_handler_runs_before_those_registered_earlier():
    """In a process of its own: a handler registered before the runtime's (as CuPy's and PyTorch's are) runs after
    the resident kernels were halted, since freeing memory would wait for them."""
    import subprocess
    import sys
    from pathlib import Path

    code = """
import atexit
from ark_runtime.runtime import resident
atexit.register(lambda: print("earlier handler", flush=True))
class Kernel:
    name = "k"
    def halt_quietly(self, grace):
        print("halted", grace, flush=True)
        return True
resident._RESIDENT.add(Kernel())
resident._keep_exit_handler_last()
atexit.register(lambda: print("later handler", flush=True))
resident._keep_exit_handler_last()  # a second launch: still before everything registered so far
"""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == [f"halted {resident.INTERRUPT_GRACE_S}", "later handler", "earlier handler"]


# --- the arguments run/wait/stop/suspend refuse --------------------------------------------------------------
def _shell(state: str):
    """A Runtime that never launched (no GPU here), in `state`: its methods' checks run as on a real one."""
    from ark_runtime.runtime import Runtime
    from ark_runtime.runtime.graph_copies import CopyGraphs

    rt = Runtime.__new__(Runtime)
    rt._state, rt._kernel, rt._dma, rt._graphs = state, None, None, CopyGraphs()
    return rt


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", None])
def test_run_refuses_a_count_that_is_not_a_positive_int(bad):
    with pytest.raises(LoopError, match="iterations must be a positive int"):
        _shell("running").run(bad)


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, "5", True, None])
def test_wait_stop_and_suspend_refuse_a_timeout_that_is_not_a_positive_finite_number(bad):
    rt = _shell("stopped")
    with pytest.raises(LoopError, match="timeout must be"):
        rt.wait(bad)
    with pytest.raises(LoopError, match="timeout must be"):
        rt.stop(timeout=bad)
    with pytest.raises(LoopError, match="timeout must be"):
        with rt.suspend(bad):
            pass


@pytest.mark.parametrize("bad", [1, 0, "yes", None])
def test_stop_refuses_a_drain_that_is_not_a_bool(bad):
    with pytest.raises(LoopError, match="drain is True"):
        _shell("stopped").stop(drain=bad)


@pytest.mark.parametrize("state", ["stopped", "stopped after a fault", "stopped after an interrupt"])
def test_a_stopped_runtime_refuses_runs_and_stops_again_quietly(state):
    rt = _shell(state)
    for call in (lambda: rt.run(1), lambda: rt.wait(), lambda: rt.suspend().__enter__()):
        with pytest.raises(LoopError, match=f"the runtime is {state}; make a new Runtime"):
            call()
    rt.stop()
    rt.stop(drain=False)
    assert rt.state == state


def _stream_shell(state: str = "running"):
    """A never-launched Runtime over a model with a host ring and counts of every wrong kind beside the right one."""
    from types import SimpleNamespace

    from ark_runtime.model import Model

    m = Model("ring")
    x = m.input("x", (4, 1))
    m.state("ring", (4, 1), "int32", "host")
    m.state("count", (1,), "int32", "host")
    m.state("fcount", (1,), "fp32", "host")
    m.state("counts", (2,), "int32", "host")
    m.state("dev", (1,), "int32")
    m.output(m.unary("neg", x))
    rt = _shell(state)
    rt.model = rt.source_model = m
    pinned, device = SimpleNamespace(ptr=1 << 20), SimpleNamespace(data=None)  # pinned memory has .ptr
    rt._tensors = [SimpleNamespace(owner=device if t.placement == "device" else pinned) for t in m.tensors]
    return rt


@pytest.mark.parametrize(("ring", "count", "says"), [
    ("nothing", "count", "model 'ring' has no tensor 'nothing'"),
    ("ring", "nothing", "has no tensor 'nothing'"),
    ("x", "count", r"stream\(\): ring x must be a state placed on the host that the runtime allocated"),
    ("dev", "count", "ring dev must be a state placed on the host"),
    ("ring", "dev", "count dev must be a state placed on the host"),
    ("ring", "fcount", "count fcount must be an int32 of one element"),
    ("ring", "counts", "count counts must be an int32 of one element"),
])
def test_stream_refuses_what_is_not_a_host_ring_and_its_count(ring, count, says):
    with pytest.raises(LoopError, match=says):
        next(_stream_shell().stream(ring, count))


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, "5", True, None])
def test_stream_refuses_a_bad_timeout_and_a_runtime_not_running(bad):
    with pytest.raises(LoopError, match="timeout must be"):
        next(_stream_shell().stream("ring", "count", timeout=bad))
    with pytest.raises(LoopError, match="the runtime is stopped; make a new Runtime"):
        next(_stream_shell("stopped").stream("ring", "count"))


def test_inside_suspend_runs_are_refused_with_the_reason():
    rt = _shell("suspended")
    with pytest.raises(LoopError, match=r"run\(\) inside suspend\(\): the kernel is not resident"):
        rt.run(1)
    with pytest.raises(LoopError, match=r"wait\(\) inside suspend\(\)"):
        rt.wait()


def test_a_closed_go_signal_holds_its_control_block_while_a_write_is_queued(monkeypatch):
    """A stream write still queued behind the caller's work when the runtime is done would land in memory the pinned
    pool may have handed to the next runtime: the signal (and its block) is kept until the go stream is idle."""
    monkeypatch.setenv(go.GO_PATH_ENV, "auto")
    go._RETIRED.clear()
    cuda = FakeCuda(callers=(0x51,), busy=(0x51,))
    sig = go.GoSignal(_block(), 0, FakeOps, cuda)
    sig.write(4)  # behind the busy caller stream
    cuda.busy.add(0xA0)  # the write has not landed
    sig.close()
    sig.close()  # stop() again
    assert go._RETIRED == [sig]
    cuda.busy.discard(0xA0)
    go.GoSignal(_block(), 0, FakeOps, FakeCuda()).close()  # any later close lets the landed one go
    assert go._RETIRED == []
    idle = go.GoSignal(_block(), 0, FakeOps, FakeCuda(busy=()))
    idle.close()
    assert go._RETIRED == []


# --- bound arrays that share bytes ---------------------------------------------------------------------------------
def _io_model():
    from ark_runtime.model import Model

    m = Model("io")
    a, b = m.input("a", (4, 8)), m.input("b", (4, 8))
    m.output(m.add(a, b))
    return m


def test_bound_inputs_may_share_bytes_but_not_with_what_the_kernel_writes():
    from ark_runtime.runtime.tensors import TensorMemory, overlapping_binds

    m = _io_model()
    out = m.tensors[m.outputs[0]]
    n = out.nbytes
    tied = [TensorMemory(0x1000, None, "device"), TensorMemory(0x1000, None, "device"), TensorMemory(0x9000, None, "device")]
    assert overlapping_binds(m, tied, {"a", "b", out.name}) is None  # two inputs on one array: only read
    into_input = [TensorMemory(0x1000, None, "device"), TensorMemory(0x5000, None, "device"),
                  TensorMemory(0x1000 + n // 2, None, "device")]
    why = overlapping_binds(m, into_input, {"a", "b", out.name})
    assert why and "bind['a']" in why and out.name in why and "bind separate arrays" in why


def test_an_overlap_hidden_behind_a_longer_span_is_found():
    from ark_runtime.model import Model
    from ark_runtime.runtime.tensors import TensorMemory, overlapping_binds

    m = Model("hidden")
    _, small = m.input("big", (64, 8)), m.input("small", (1, 8))
    out = m.unary("neg", small)
    m.output(out)
    # big spans everything; small (an input) sits at its start; the output lies inside big, past small
    mem = [TensorMemory(0x1000, None, "device"), TensorMemory(0x1000, None, "device"),
           TensorMemory(0x1000 + 1024, None, "device")]
    why = overlapping_binds(m, mem, {"big", "small", out.name})
    assert why and "bind['big']" in why and out.name in why


def test_an_elementwise_op_may_write_over_the_input_only_it_reads():
    from ark_runtime.model import Model
    from ark_runtime.runtime.tensors import TensorMemory, overlapping_binds

    m = Model("flip")
    s = m.input("s", (4, 8))
    t = m.unary("neg", s)
    m.output(t)
    same = [TensorMemory(0x1000, None, "device"), TensorMemory(0x1000, None, "device")]
    assert overlapping_binds(m, same, {"s", t.name}) is None  # state carried across iterations
    shifted = [TensorMemory(0x1000, None, "device"), TensorMemory(0x1010, None, "device")]
    assert overlapping_binds(m, shifted, {"s", t.name})  # part of it: refused
    m2 = Model("read-twice")
    s2 = m2.input("s", (4, 8))
    t2 = m2.unary("neg", s2)
    m2.output(t2, m2.unary("exp", s2))  # another op reads s too: it would see the overwritten value
    assert overlapping_binds(m2, same + [TensorMemory(0x9000, None, "device")], {"s", t2.name})


def test_the_host_writes_go_unless_another_path_is_asked_for(monkeypatch):
    monkeypatch.delenv(go.GO_PATH_ENV, raising=False)
    assert go.wanted_path() == "host"
    assert go.stream_ops(0, FakeOps) == (None, f"{go.GO_PATH_ENV}=host")
    monkeypatch.setenv(go.GO_PATH_ENV, "teleport")
    with pytest.raises(LoopError, match="ARK_GO_PATH='teleport': give one of auto, stream, host"):
        go.wanted_path()


def test_leaving_a_with_block_stops_drained_or_at_once_and_notes_a_failed_stop():
    from ark_runtime.runtime.scoped import StopsOnExit
    from ark_runtime.runtime.world_process import WorldProcess
    from ark_runtime.runtime.world_runtime import WorldRuntime

    class Stopper(StopsOnExit):
        _stopping = "the thing"

        def __init__(self, fails: bool = False):
            self.calls, self.fails = [], fails

        def stop(self, drain: bool = True, timeout: float = 30.0) -> None:
            self.calls.append(drain)
            if self.fails:
                raise LoopError("would not stop")

    with Stopper() as s:
        pass
    assert s.calls == [True]
    s = Stopper(fails=True)
    with pytest.raises(ValueError, match="the block's") as info:
        with s:
            raise ValueError("the block's")
    assert s.calls == [False] and info.value.__notes__ == ["stopping the thing after it: would not stop"]
    from ark_runtime.runtime import Runtime

    assert Runtime._stopping == "the runtime" and WorldRuntime._stopping == "the World"
    wp = WorldProcess.__new__(WorldProcess)
    wp.rank = 3
    assert wp._stopping == "rank 3"
