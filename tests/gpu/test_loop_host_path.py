"""The runtime's host path on a GPU: Ctrl-C during wait() and exit with iterations queued end the process within a
second, with the GPU usable by the next process; stop(drain=False) and an interrupt halt a kernel with iterations
queued and no waits between SMs at once; suspend() lets any CUDA work run and the kernel goes on where it was (it is
refused on the graph-copy path); run() orders the kernel's reads after work queued on the caller's PyTorch or CuPy stream
without blocking the host; `done` moves by one as each iteration ends. Skips without a GPU."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from ark_runtime.model import Model

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
CHILD_START_S = 600  # a child compiles the slow model's kernel when no cached build is there


class Child:
    """tests.gpu.host_path_child in a process of its own; its output lines read as they come."""

    def __init__(self, mode: str):
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.gpu.host_path_child", mode], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.out: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.out.append(line.rstrip("\n"))
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def await_line(self, want: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                pytest.fail(f"no {want!r} from the child in {timeout:.0f} s; it printed {self.out}")
            if line is None:
                pytest.fail(f"the child ended before {want!r} (rc {self.proc.wait()}): {self.out}\n"
                            f"{self.proc.stderr.read()[-4000:]}")
            if line == want:
                return

    def exit_s(self, since: float, limit: float = 30.0) -> float:
        """Seconds from `since` until the child had exited (killed, and the test failed, past `limit`)."""
        try:
            self.proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the child was still running {limit:.0f} s later: {self.out}")
        return time.monotonic() - since

    def stderr(self) -> str:
        return self.proc.stderr.read()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _gpu_usable() -> None:
    child = Child("check")
    child.await_line("ok", CHILD_START_S)
    assert child.exit_s(time.monotonic()) < 30 and child.proc.returncode == 0, child.stderr()[-4000:]


def test_ctrl_c_during_wait_ends_the_process_within_a_second(gpu):
    child = Child("interrupt")
    child.await_line("waiting", CHILD_START_S)
    time.sleep(0.3)  # inside wait(), iterations running
    child.proc.send_signal(signal.SIGINT)
    took = child.exit_s(time.monotonic())
    err = child.stderr()
    assert took < 1.0, f"the child took {took:.2f} s to exit after SIGINT: {child.out}\n{err[-4000:]}"
    assert "KeyboardInterrupt" in err and child.proc.returncode != 0, err[-4000:]
    (said,) = [line for line in child.out if line.startswith("interrupted")]
    done = int(said.split(", ")[-1].split()[0])
    assert "'stopped after an interrupt'" in said and 2 < done < 100_002, said
    _gpu_usable()


@pytest.mark.parametrize("mode", ["exit-local", "exit-global"])
def test_exit_with_iterations_queued_ends_the_process_within_a_second(gpu, mode):
    """exit-local: the Runtime is collected as main returns; exit-global: it lives to interpreter exit. Either way
    the queued iterations are dropped, not waited for."""
    child = Child(mode)
    child.await_line("returning", CHILD_START_S)
    took = child.exit_s(time.monotonic())
    err = child.stderr()
    assert took < 1.0, f"the child took {took:.2f} s to exit with iterations queued: {err[-4000:]}"
    assert child.proc.returncode == 0 and "did not leave" not in err, err[-4000:]
    _gpu_usable()


def _chain():
    """Every SM runs its own rows and waits for no other: a CTA never waits for go with iterations queued."""
    from ark_runtime import models

    return models.chain(8, rows=64, cols=1024)


def test_stop_without_draining_halts_a_kernel_with_iterations_queued_at_once(gpu):
    from ark_runtime.runtime import Runtime

    m = _chain()
    rt = Runtime(m)
    assert not any(i["op"] == "wait" for s in rt.plan.streams for i in s)
    rt.set("x", np.ones((64, 1024)))
    rt.run(10_000_000)
    time.sleep(0.05)
    t0 = time.monotonic()
    rt.stop(drain=False)
    took = time.monotonic() - t0
    assert took < 0.5, f"stop(drain=False) took {took:.2f} s"
    assert rt.state == "stopped" and 0 < rt.iterations_done < 10_000_000
    with Runtime(m) as again:  # the GPU runs the next one
        again.run(500)
        again.stop()  # drains: every queued iteration runs first
        assert again.iterations_done == 500 and again.state == "stopped"


def test_an_interrupt_in_wait_halts_the_kernel_and_goes_on_as_the_interrupt(gpu):
    from ark_runtime.runtime import LoopError, Runtime

    def interrupt(*_):
        raise KeyboardInterrupt

    m = _chain()
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            with Runtime(m) as rt:
                rt.run(10_000_000)
                signal.setitimer(signal.ITIMER_REAL, 0.2)
                t0 = time.monotonic()
                rt.wait(timeout=600)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    took = time.monotonic() - t0
    assert took < 0.2 + 0.6, f"{took:.2f} s from wait() to the interrupt's end"
    assert rt.state == "stopped after an interrupt" and not rt._kernel.resident
    with pytest.raises(LoopError, match="stopped after an interrupt"):
        rt.run()
    with Runtime(m) as again:
        again.run(3)
        again.wait()


def test_suspend_lets_allocation_and_a_first_launch_run_then_the_kernel_goes_on(gpu):
    import cupy

    from ark_runtime.runtime import LoopError, Runtime

    m = Model("suspend")
    x = m.input("x", (256, 1024), "fp32")
    y = m.unary("neg", x)
    m.output(y)
    xs = np.random.default_rng(4).standard_normal((256, 1024)).astype(np.float32)
    with Runtime(m) as rt:
        rt.set("x", xs)
        rt.run(3)
        rt.wait()
        rt.run(2)  # still queued when suspend() is asked for: it waits for them
        with rt.suspend() as same:
            assert same is rt and rt.state == "suspended" and rt.iterations_done == 5
            with pytest.raises(LoopError, match=r"run\(\) inside suspend\(\)"):
                rt.run()
            # both wait for the whole device, so neither returns while the loop kernel is resident
            n = (48 << 20) + 4096 * (uuid.uuid4().int % 64 + 1)  # a size no pool block has yet: a cudaMalloc
            big = cupy.arange(n, dtype=cupy.float32)
            triple = cupy.ElementwiseKernel("float32 a", "float32 b", "b = a * 3.0f + 1.0f",
                                            f"ark_suspend_{uuid.uuid4().hex}")  # never launched: a module load
            out = triple(big)
            assert out.size == n and float(out[7]) == 22.0 and float(out[1000]) == 3001.0
            rt.set("x", xs * 2)
        assert rt.state == "running"
        rt.run(4)
        rt.wait(timeout=30)
        assert rt.iterations_done == 9
        np.testing.assert_array_equal(rt.get(y.name), -xs * 2)
        stamps = rt.iteration_ns()
        assert len(stamps) == 9 and (np.diff(stamps) > 0).all()
        with pytest.raises(ValueError, match="in the block"):
            with rt.suspend():
                raise ValueError("in the block")
        assert rt.state == "running"  # relaunched all the same
        rt.run(1)
        rt.wait()
        assert rt.iterations_done == 10


def test_suspend_on_the_graph_copy_path_is_refused_and_the_kernel_goes_on(gpu):
    from ark_runtime import models
    from ark_runtime.runtime import LoopError, Runtime, graph_copies_unavailable

    reason = graph_copies_unavailable()
    if reason:
        pytest.skip(f"device-graph copies cannot run here: {reason}")
    m = models.copy_out(8192)
    out = m.tensors[m.outputs[0]].name
    x = np.arange(2048, dtype=np.float32)
    with Runtime(m, copy_path="graph") as rt:
        rt.set("x", x)
        rt.run(3)
        with pytest.raises(LoopError, match="device-graph copies.*copy_path='sm' or 'engine'"):
            with rt.suspend():
                pytest.fail("the block ran")
        assert rt.state == "running"
        rt.wait(timeout=30)
        assert rt.iterations_done == 3
        np.testing.assert_array_equal(rt.get(out), x)


SLOW_FILL = r"""
extern "C" __global__ void slow_fill(float* x, int n, float v, unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = v;
}
"""


def _order_model():
    m = Model("order")
    x = m.input("x", (64, 1024), "fp32")
    y = m.unary("neg", x)
    m.output(y)
    return m, y.name


def test_run_orders_the_kernel_after_a_slow_pytorch_write(gpu):
    torch = pytest.importorskip("torch")
    from ark_runtime.runtime import Runtime

    m, out = _order_model()
    tx = torch.zeros(64, 1024, device="cuda")
    torch.cuda._sleep(1000)  # both kernels loaded before the loop kernel is resident (a first launch loads)
    tx.fill_(1.0)
    torch.cuda.synchronize()
    with Runtime(m, bind={"x": tx}) as rt:
        if os.environ.get("ARK_GO_PATH") in ("auto", "stream"):
            assert rt.go_path == os.environ["ARK_GO_PATH"], rt.go_path_reason
        for value in (2.0, 3.0, 4.0):
            torch.cuda._sleep(int(60e6))  # tens of ms of GPU time on PyTorch's current stream
            tx.fill_(value)  # in place, queued behind the sleep
            t0 = time.perf_counter()
            rt.run(1)  # no host synchronization: the kernel must still read x after the fill
            run_s = time.perf_counter() - t0
            rt.wait(timeout=30)
            np.testing.assert_array_equal(rt.get(out), np.full((64, 1024), -value, np.float32))
            if rt.go_path != "host":
                assert run_s < 5e-3, f"run() took {run_s * 1e3:.1f} ms: it waited for the caller's stream"
        if rt.go_path != "host":
            assert rt.go_writes["stream"] == 3, rt.go_writes  # the caller's stream was busy every time
        torch.cuda.current_stream().synchronize()  # not the device's: that waits for the resident kernel too
        before = rt.go_writes
        rt.run(1)  # nothing queued anywhere
        rt.wait()
        if rt.go_path == "auto":
            assert rt.go_writes["host"] == before["host"] + 1, rt.go_writes


def test_run_orders_the_kernel_after_a_slow_cupy_write_on_the_current_stream(gpu):
    import cupy

    from ark_runtime.runtime import Runtime

    m, out = _order_model()
    xs = cupy.zeros((64, 1024), cupy.float32)
    fill = cupy.RawKernel(SLOW_FILL, "slow_fill")
    fill((8,), (256,), (xs, np.int32(xs.size), np.float32(1.0), np.uint64(1000)))  # loaded before
    cupy.cuda.Device().synchronize()
    mine = cupy.cuda.Stream(non_blocking=True)
    with Runtime(m, bind={"x": xs}) as rt:
        for value in (5.0, 6.0):
            with mine:
                fill((8,), (256,), (xs, np.int32(xs.size), np.float32(value), np.uint64(30_000_000)))
                t0 = time.perf_counter()
                rt.run(1)
                run_s = time.perf_counter() - t0
            rt.wait(timeout=30)
            np.testing.assert_array_equal(rt.get(out), np.full((64, 1024), -value, np.float32))
            if rt.go_path != "host":
                assert run_s < 5e-3, f"run() took {run_s * 1e3:.1f} ms: it waited for the caller's stream"


@pytest.mark.parametrize("path", ["host", "stream"])
def test_each_go_path_when_asked_orders_the_kernel_after_the_callers_work(gpu, monkeypatch, path):
    """ARK_GO_PATH=stream (every write on the GPU, idle or not) and =host (the host synchronizes, then writes: the
    default)."""
    import cupy

    from ark_runtime.runtime import Runtime

    monkeypatch.setenv("ARK_GO_PATH", path)
    m, out = _order_model()
    xs = cupy.zeros((64, 1024), cupy.float32)
    fill = cupy.RawKernel(SLOW_FILL, "slow_fill")
    fill((8,), (256,), (xs, np.int32(xs.size), np.float32(1.0), np.uint64(1000)))
    cupy.cuda.Device().synchronize()
    with Runtime(m, bind={"x": xs}) as rt:
        assert rt.go_path == path and (rt.go_path_reason == "ARK_GO_PATH=host") == (path == "host")
        for value in (7.0, 8.0):
            fill((8,), (256,), (xs, np.int32(xs.size), np.float32(value), np.uint64(20_000_000)))
            rt.run(1)
            rt.wait()
            np.testing.assert_array_equal(rt.get(out), np.full((64, 1024), -value, np.float32))
        cupy.cuda.get_current_stream().synchronize()  # not the device's: that waits for the resident kernel too
        rt.run(1)  # idle: still the path asked for
        rt.wait()
        assert rt.go_writes == ({"stream": 3, "host": 0} if path == "stream" else {"stream": 0, "host": 3})


def test_done_moves_by_one_as_each_iteration_ends_when_asked(gpu, monkeypatch):
    from ark_runtime.runtime import Runtime

    monkeypatch.setenv("ARK_PUBLISH_EVERY", "1")  # the default, 16, publishes every 16th while a run goes on
    m = Model("publish")
    x = m.input("x", (2048, 4096), "fp32")  # 32 MiB: tens of microseconds an iteration
    m.output(m.unary("silu", m.unary("neg", x)))
    with Runtime(m) as rt:
        rt.run(2)
        rt.wait()
        seen = [rt.iterations_done]
        rt.run(50)
        deadline = time.monotonic() + 30
        while seen[-1] < 52 and time.monotonic() < deadline:
            now = rt.iterations_done
            if now != seen[-1]:
                seen.append(now)
        rt.wait()
    assert seen == sorted(seen), f"done went back: {seen}"
    assert seen[-1] == 52 and len(set(seen) & set(range(3, 53))) >= 45, f"done moved in steps: {seen}"
