"""Exceptions the driver raises: each says what was wrong and what to do about it."""

from __future__ import annotations

from driver.abi import ERROR_DOCS, ErrorCode


class ArkdmaError(Exception):
    """Base class of every arkdma error."""


class RegionError(ArkdmaError, ValueError):
    """A region could not be registered or used as asked."""


class QueueError(ArkdmaError):
    """A queue halted on an error completion."""

    def __init__(self, queue: int, code: ErrorCode, cookie: int, index: int):
        self.queue, self.code, self.cookie, self.index = queue, ErrorCode(code), cookie, index
        super().__init__(
            f"queue {queue} halted with {self.code.name} ({ERROR_DOCS[self.code]}) at producer index "
            f"{index} (cookie {cookie:#x}); fix the descriptor, then disable and re-enable the queue"
        )


class EngineTimeout(ArkdmaError, TimeoutError):
    """An engine did not answer within its time budget."""


class EngineUnavailable(ArkdmaError):
    """The engine asked for cannot run here; the message says why and what to install or do."""
