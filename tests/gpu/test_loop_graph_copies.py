"""Copies on the device-graph path: the loop kernel, running inside a graph, launches a pre-built graph per copy
(a copy engine moves the bytes, no SM) and waits for its token; every GRAPH_LAUNCHES_PER_RUN launches it relaunches
its own graph. Checked byte for byte, across those relaunches, beside compute that reads what a copy wrote, and
with the GPU usable afterwards. Skips without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from ark_runtime.model import Model

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def graphs(gpu):
    from ark_runtime.runtime import graph_copies_unavailable

    reason = graph_copies_unavailable()
    if reason:
        pytest.skip(f"device-graph copies cannot run here: {reason}")


@pytest.mark.parametrize("nbytes", [8192, 1 << 20, 4 * 12345])
def test_graph_copy_to_pinned_host(graphs, nbytes):
    from ark_runtime import models
    from ark_runtime.runtime import Runtime

    m = models.copy_out(nbytes)
    x = np.random.default_rng(2).standard_normal(nbytes // 4).astype(np.float32)
    with Runtime(m, copy_path="graph") as rt:
        rt.set("x", x)
        rt.run(3)
        rt.wait()
        out = m.tensors[m.outputs[0]].name
        np.testing.assert_array_equal(rt.get(out), x)
        (r,) = rt.report()
        assert (r.path, r.bytes, r.uses_sms) == ("graph", nbytes, False)
        assert r.time_us > 0


def test_every_iteration_copies_across_relaunches(graphs):
    """Each iteration's copy carries that iteration's input, through several relaunches of the kernel's graph;
    the kernel stays resident (its stream busy) between runs and leaves on stop()."""
    from ark_runtime import models
    from ark_runtime.runtime import GRAPH_LAUNCHES_PER_RUN, Runtime

    m = models.copy_out(4096)
    out = m.tensors[m.outputs[0]].name
    total = 2 * GRAPH_LAUNCHES_PER_RUN + 7
    rt = Runtime(m, copy_path="graph")
    try:
        for i in range(total):
            x = np.full(1024, float(i), np.float32)
            rt.set("x", x)
            rt.run(1)
            rt.wait(timeout=10)
            got = rt.get(out)
            assert got[0] == i and got[-1] == i, f"iteration {i} copied {got[0]}"
        assert rt.iterations_done == total
        assert not rt._kernel.stream.done  # resident, relaunched by itself twice
        rt.run(3 * GRAPH_LAUNCHES_PER_RUN)  # many relaunches with no host between iterations
        rt.wait(timeout=30)
        assert rt.iterations_done == total + 3 * GRAPH_LAUNCHES_PER_RUN
    finally:
        rt.stop()
    assert rt._kernel.stream.done and rt.state == "stopped"


def test_compute_reads_what_a_graph_copy_wrote(graphs):
    """A device-to-device copy on a copy engine in the middle of a model: the op after it waits for it."""
    from ark_runtime.runtime import Runtime

    m = Model("graph_mid")
    x = m.input("x", (300, 257), "fp32")
    y = m.copy(m.unary("neg", x), "device")
    m.output(m.binary("add", y, x))
    m.output(m.copy(y, "host"))
    xs = np.random.default_rng(3).standard_normal((300, 257)).astype(np.float32)
    with Runtime(m, copy_path="graph", fuse_chains=False) as rt:
        for k in range(3):
            rt.set("x", xs * (k + 1))
            rt.run(2)
            rt.wait()
            np.testing.assert_array_equal(rt.get(m.tensors[m.outputs[0]].name), np.zeros_like(xs))
            np.testing.assert_array_equal(rt.get(m.tensors[m.outputs[1]].name), -xs * (k + 1))
        assert {r.path for r in rt.report()} == {"graph"}
        rt.run(200)  # two graph copies an iteration: a relaunch every GRAPH_LAUNCHES_PER_RUN // 2 iterations
        rt.wait(timeout=30)


def test_auto_takes_the_graph_path_for_large_copies(graphs, monkeypatch):
    from ark_runtime import models
    from ark_runtime.runtime import Runtime

    with Runtime(models.copy_out(1 << 20), engine=None) as rt:
        assert rt.report()[0].path == "graph"
    with Runtime(models.copy_out(8192), engine=None) as rt:
        assert rt.report()[0].path == "sm"
    monkeypatch.setenv("ARK_GRAPH_COPIES", "0")
    with Runtime(models.copy_out(1 << 20), engine=None) as rt:
        assert rt.report()[0].path == "sm"


def test_graph_path_refused_with_a_reason(graphs, monkeypatch):
    from ark_runtime import models
    from ark_runtime.runtime import LoopError, Runtime

    monkeypatch.setenv("ARK_GRAPH_COPIES", "0")
    with pytest.raises(LoopError, match="copy_path='graph': turned off by ARK_GRAPH_COPIES=0"):
        Runtime(models.copy_out(8192), copy_path="graph")


def test_graph_runtime_then_plain_runtime(graphs):
    """After a graph-path runtime stops, the GPU runs the next kernel: nothing of the graphs is left running."""
    from ark_runtime import models
    from ark_runtime.runtime import Runtime

    with Runtime(models.copy_out(8192), copy_path="graph") as rt:
        rt.run(130)  # past one relaunch of the kernel's graph
        rt.wait()
        assert rt.iterations_done == 130
    m = models.copy_out(8192)
    x = np.arange(2048, dtype=np.float32)
    with Runtime(m, copy_path="sm") as rt:
        rt.set("x", x)
        rt.run()
        rt.wait()
        np.testing.assert_array_equal(rt.get(m.tensors[m.outputs[0]].name), x)


def _flip() -> Model:
    """t = -s, bound to one buffer with s: every iteration changes the sign of what the copy moves."""
    m = Model("flip")
    t = m.unary("neg", m.input("s", (64, 1024), "fp32"))
    m.output(t)
    m.output(m.copy(t, "host"))
    return m


def test_copies_launched_ahead_carry_their_own_iteration(graphs):
    """Back to back, each iteration's graph copy is launched during the iteration before and held at its gate
    (copy.cuh) until its tile runs. The source changes sign every iteration, so a copy that went before its gate
    opened would land the iteration before's, of the other sign; 200 iterations pass relaunches of the kernel's
    graph, where nothing is launched ahead."""
    import cupy

    from ark_runtime.runtime import Runtime

    m = _flip()
    x = np.random.default_rng(5).standard_normal((64, 1024)).astype(np.float32)
    buf = cupy.asarray(x)
    t, host = (m.tensors[o].name for o in m.outputs)
    with Runtime(m, copy_path="graph", bind={"s": buf, t: buf}) as rt:
        assert rt.graph_ahead, "a copy model leaves room beside the loop kernel for the gate"
        done = 0
        for n in (1, 2, 7, 64, 200):
            rt.run(n)
            rt.wait(timeout=30)
            done += n
            np.testing.assert_array_equal(rt.get(host), x * (-1.0) ** done, err_msg=f"after {done} iterations")


def test_without_launches_ahead_the_copies_are_the_same(graphs, monkeypatch):
    import cupy

    from ark_runtime.runtime import Runtime

    monkeypatch.setenv("ARK_GRAPH_AHEAD", "0")
    m = _flip()
    x = np.random.default_rng(6).standard_normal((64, 1024)).astype(np.float32)
    buf = cupy.asarray(x)
    t, host = (m.tensors[o].name for o in m.outputs)
    with Runtime(m, copy_path="graph", bind={"s": buf, t: buf}) as rt:
        assert not rt.graph_ahead
        rt.run(9)
        rt.wait(timeout=30)
        np.testing.assert_array_equal(rt.get(host), -x)


def test_a_kernel_stopped_mid_run_releases_its_launch_ahead(graphs):
    """Stopped by the host's timeout in the middle of a long run, with the next copy launched and held at its gate:
    the kernel opens the gate as it leaves, so it leaves, its graphs close and the GPU runs the next kernel."""
    from ark_runtime import models
    from ark_runtime.runtime import LoopTimeout, Runtime

    m = models.copy_out(1 << 20)
    rt = Runtime(m, copy_path="graph")
    try:
        assert rt.graph_ahead
        rt.run(1_000_000)
        with pytest.raises(LoopTimeout):
            rt.wait(timeout=0.3)
        assert rt._kernel.stream.done
    finally:
        rt.stop()
    x = np.arange(2048, dtype=np.float32)
    with Runtime(models.copy_out(8192), copy_path="graph") as rt:
        rt.set("x", x)
        rt.run(3)
        rt.wait()
        np.testing.assert_array_equal(rt.get(rt.model.tensors[rt.model.outputs[0]].name), x)
