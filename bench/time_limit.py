"""A time limit on a block of Python code: `with time_limit(seconds): ...` raises TimeLimitExceeded inside the block
once the time has passed (SIGALRM).

The exception arrives when the interpreter next runs Python code: a C call that never returns (a CUDA
synchronize behind a kernel that never ends) is not cut short. It derives from BaseException so that code inside
the block that catches every Exception (compilers falling back, retries) does not swallow it. Off the main thread
(where signals cannot be handled), without setitimer, or while another alarm is set, the block runs with no limit
of its own."""

from __future__ import annotations

import contextlib
import math
import signal
import threading
from collections.abc import Iterator


class TimeLimitExceeded(BaseException):
    def __init__(self, seconds: float):
        super().__init__(f"timed out after {seconds:.0f} s")
        self.seconds = seconds


def enforceable() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0 or math.isnan(seconds):
        raise ValueError(f"a time limit is a positive number of seconds, not {seconds!r}")
    if not enforceable() or math.isinf(seconds) or signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        yield  # an alarm already set (pytest-timeout's signal method, say) is left alone, and is the only limit
        return

    def expire(signum, frame):
        raise TimeLimitExceeded(seconds)

    before = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
