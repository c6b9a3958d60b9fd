"""The host's bounded wait for a producing kernel, with a stand-in stream: it returns when the stream
drains, and past its timeout aborts the queues and raises instead of blocking."""

from __future__ import annotations

import time

import pytest

from driver.errors import EngineTimeout
from driver.gpu.launch import finish


class Stream:
    def __init__(self, busy_for: float, stops_on_abort: bool = False):
        self.until = time.monotonic() + busy_for
        self.stops_on_abort = stops_on_abort
        self.synchronized = False

    @property
    def done(self) -> bool:
        return time.monotonic() >= self.until

    def synchronize(self) -> None:
        assert self.done
        self.synchronized = True


class Queue:
    def __init__(self, stream: Stream):
        self.stream, self.aborted = stream, False

    def abort(self) -> None:
        self.aborted = True
        if self.stream.stops_on_abort:
            self.stream.until = time.monotonic() + 0.01


def test_returns_once_the_stream_drains():
    s = Stream(0.05)
    waited = finish(s, timeout=5)
    assert 0.04 < waited < 1 and s.synchronized


def test_aborts_the_queues_past_the_timeout():
    s = Stream(60, stops_on_abort=True)
    qs = [Queue(s), Queue(s)]
    t0 = time.monotonic()
    with pytest.raises(EngineTimeout, match="aborted 2 queue.*stopped after the abort"):
        finish(s, timeout=0.1, queues=qs)
    assert all(q.aborted for q in qs) and time.monotonic() - t0 < 1


def test_says_when_the_kernel_ignores_the_abort():
    s = Stream(60)
    with pytest.raises(EngineTimeout, match="still running"):
        finish(s, timeout=0.05, queues=[Queue(s)])
