"""The `card-uart` engine: the engine core on a board, reached through its UART bridge (fpga/link/board.py).

The board's serial port comes from ARKDMA_CARD_UART (a tty such as /dev/ttyUSB1, or tcp://HOST:PORT for a
board served over the network or the board design simulated: `arkdma sim board`), its baud from
ARKDMA_CARD_UART_BAUD (115200 unless the bitstream was built with another).
"""

from __future__ import annotations

import os

from driver.abi import Capability
from driver.provider import EngineProvider

PORT_ENV = "ARKDMA_CARD_UART"
BAUD_ENV = "ARKDMA_CARD_UART_BAUD"
TIMEOUT_S = 2.0  # per bridge access


def _baud() -> int:
    raw = os.environ.get(BAUD_ENV, "115200")
    if not raw.isdigit():
        from driver.errors import EngineUnavailable

        raise EngineUnavailable(f"{BAUD_ENV}={raw!r} is not a baud rate (e.g. 115200)")
    return int(raw)


class UartCardProvider(EngineProvider):
    name = "card-uart"
    summary = "the engine core on an FPGA board without PCIe, through its UART bridge (function, not speed)"
    max_workload_bytes = 64 << 10
    workload_pace = "32-bit words over a serial line: kilobytes a second"

    def unavailable_reason(self) -> str | None:
        if not os.environ.get(PORT_ENV):
            return (f"no board given: set {PORT_ENV} to its serial port (e.g. /dev/ttyUSB1) or to tcp://HOST:PORT "
                    "(a simulated board: arkdma sim board)")
        return None

    def _link(self):
        from fpga.link.serial_link import SerialLink

        return SerialLink(os.environ[PORT_ENV], _baud(), TIMEOUT_S)

    def open(self, num_queues: int | None = None, slots: int | None = None, num_regions: int | None = None):
        from driver.errors import EngineUnavailable
        from fpga.link.board import BoardBackend, check_geometry

        reason = self.unavailable_reason()
        if reason:
            raise EngineUnavailable(f"engine card-uart cannot run here: {reason}")
        link = self._link()
        try:
            backend = BoardBackend(link, on_close=link.close)
        except BaseException:
            link.close()
            raise
        try:
            check_geometry(backend, num_queues, slots, num_regions)
        except BaseException:
            backend.close()
            raise
        return backend

    def capabilities(self) -> Capability:
        with self.open() as backend:
            return backend.geometry.caps

    def run_scenarios(self, scenarios, **params) -> dict:
        from fpga.link.board import play_scenarios

        with self._link() as link:
            return play_scenarios(link, scenarios)
