"""The error log's overflow rule (docs/abi-rules.md), drawn by Hypothesis on the engines that run in this process:
random runs of errors, pops, clears (STATUS.ERRLOG_OVERFLOW written 1) and resets, each observation checked
against the rule itself. The RTL's register-level version is tests/sim/test_error_log.py; every engine plays the
fixed sequence as the scenario rule_error_log_overflow_flag."""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ark_runtime import engines  # noqa: E402
from driver.abi import ErrorCode  # noqa: E402

DEPTH = 4  # small, so runs overflow it often
QUEUES = 2
NOT_REGISTERED = 9  # an enable whose completion word lives in this region halts at once: one error

OPS = st.one_of(
    st.tuples(st.just("errors"), st.integers(0, QUEUES - 1), st.integers(1, DEPTH + 2)),
    st.tuples(st.just("pop")),
    st.tuples(st.just("clear")),
    st.tuples(st.just("reset")),
)


class Rule:
    """What the rule says the log and the flag hold."""

    def __init__(self):
        self.entries: list[tuple[int, int]] = []  # (queue, START) of each kept error, oldest first
        self.overflow = False

    def error(self, queue: int, start: int) -> None:
        if len(self.entries) < DEPTH:
            self.entries.append((queue, start))
        else:
            self.overflow = True


def _engine(name: str):
    prov = engines.provider(name)
    reason = prov.unavailable_reason()
    if reason:
        pytest.skip(f"engine {name} cannot run here: {reason}")
    return prov.open(num_queues=QUEUES, slots=16, num_regions=16, errlog_depth=DEPTH)


@pytest.mark.parametrize("name", ["reference", "software-host"])
def test_overflow_flag_follows_the_rule(name):
    with _engine(name) as eng:

        @settings(max_examples=60, deadline=None, derandomize=True)
        @given(st.lists(OPS, max_size=14))
        def run(ops):
            eng.reset()
            rule, start = Rule(), 0
            for op in ops:
                if op[0] == "errors":
                    _, q, n = op
                    for _ in range(n):
                        start += 1
                        eng.disable_queue(q)
                        eng.configure_queue(q, NOT_REGISTERED, 0, start)
                        eng.enable_queue(q)
                        rule.error(q, start)
                elif op[0] == "pop":
                    log = eng.error_log()
                    got = [(e.queue, e.index) for e in log]
                    assert got == rule.entries, f"after {ops}: the log popped {got}, expected {rule.entries}"
                    assert {e.code for e in log} <= {ErrorCode.UNKNOWN_REGION}
                    rule.entries = []
                elif op[0] == "clear":
                    eng.clear_errlog_overflow()
                    rule.overflow = False
                else:
                    eng.reset()
                    rule = Rule()
                assert eng.errlog_overflow() == rule.overflow, f"after {ops}: STATUS.ERRLOG_OVERFLOW"
            assert [(e.queue, e.index) for e in eng.error_log()] == rule.entries
            assert eng.errlog_overflow() == rule.overflow, "reading the log changed the flag"

        run()
