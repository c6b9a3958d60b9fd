"""Exceptions of the FPGA flow: each says what failed and what to do about it."""

from __future__ import annotations

from pathlib import Path

from driver.errors import ArkdmaError


class FpgaFlowError(ArkdmaError):
    """Base class of the FPGA flow's errors."""


class ToolMissing(FpgaFlowError):
    """A tool of the open flow is not installed; the message names the package that provides it."""


class ToolFailed(FpgaFlowError):
    """A tool exited with an error or ran past its time limit; the message ends with its log's tail."""

    def __init__(self, tool: str, reason: str, log: Path, tail: str):
        self.tool, self.log = tool, log
        super().__init__(f"{tool} {reason}; whole log: {log}\n{tail}")


class ReportError(FpgaFlowError):
    """A tool's report lacks what the estimate needs (a tool version the parser does not know)."""
