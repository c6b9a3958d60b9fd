"""Run by tests/gpu/test_loop_host_path.py in a process of its own, with Python's default SIGINT handler:

    interrupt    a Runtime whose iterations take about a millisecond, 100,000 queued, `wait(timeout=600)`; prints
                 "waiting" first. Ctrl-C (SIGINT) must end the process at once.
    exit-local   the same Runtime, 100,000 queued, then main returns (the Runtime is collected); prints "returning".
    exit-global  the same, the Runtime held by a module global (halted at interpreter exit); prints "returning".
    check        a small model run and checked against NumPy; prints "ok" (the GPU is usable after the others).
"""

from __future__ import annotations

import signal
import sys

import numpy as np

from ark_runtime.model import Model

QUEUED = 100_000
HELD = []  # exit-global: keeps the Runtime to the end


def slow_model() -> Model:
    """Eight elementwise passes over 256 MiB of fp32 each, unfused: about a millisecond an iteration on an H200."""
    m = Model("slow")
    y = m.input("x", (8192, 8192), "fp32")
    for fn in ("neg", "relu", "neg", "silu", "neg", "relu", "neg", "silu"):
        y = m.unary(fn, y)
    m.output(y)
    return m


def interrupt() -> None:
    from ark_runtime.runtime import Runtime

    with Runtime(slow_model(), fuse_chains=False) as rt:
        rt.run(2)
        rt.wait(timeout=60)
        rt.run(QUEUED)
        print("waiting", flush=True)
        try:
            rt.wait(timeout=600)
        except KeyboardInterrupt:
            print(f"interrupted: state {rt.state!r}, {rt.iterations_done} done", flush=True)
            raise


def exit_with_iterations_queued(hold: bool) -> None:
    from ark_runtime.runtime import Runtime

    rt = Runtime(slow_model(), fuse_chains=False)
    rt.run(2)
    rt.wait(timeout=60)
    rt.run(QUEUED)
    if hold:
        HELD.append(rt)
    print("returning", flush=True)


def check() -> None:
    from ark_runtime.runtime import Runtime

    m = Model("check")
    x = m.input("x", (64, 256), "fp32")
    y = m.unary("neg", x)
    m.output(y)
    xs = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    with Runtime(m) as rt:
        rt.set("x", xs)
        rt.run(3)
        rt.wait(timeout=30)
        np.testing.assert_array_equal(rt.get(y.name), -xs)
    print("ok", flush=True)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    mode = sys.argv[1]
    {"interrupt": interrupt, "exit-local": lambda: exit_with_iterations_queued(False),
     "exit-global": lambda: exit_with_iterations_queued(True), "check": check}[mode]()
