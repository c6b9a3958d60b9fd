"""The board simulated: the engine core as it is built for the board (fpga/cores/engine_core.py: the UART
bridge, the engine, the on-chip RAM), under Verilator, its serial line served on a TCP port. The host's
`card-uart` backend connects to it with a `tcp://` link, exactly as it drives a board through its tty, so
register programs, bridge frames, the UART and the engine all run as on the board.

The simulator's side (sim/board_session.py) turns bytes from the socket into UART bits on the core's rx
pin, and the core's tx pin back into bytes, through a UART pair beside the core (the bridge's own UART
cores). The UART runs at a few clock cycles a bit (the design's baud is a build parameter): the line is
the slow part of the board, and the simulation keeps the clock for the engine.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.params import EngineParams
from sim.build import BUILD_ROOT, SimulationError, Top, build, run

CLOCK_MHZ = 100.0
UART_DIVISOR = 4  # clock cycles per UART bit: the fewest the UART takes
RAM_BYTES = 256 * 1024
PORT_ENV = "ARKDMA_BOARD_PORT"  # the TCP port the simulated board serves its line on
ONCE_ENV = "ARKDMA_BOARD_ONCE"  # "1": the simulation ends when the first host that sent something hangs up
BOARD_PARAMS = dict(data_width=64, reads_outstanding=16, buffer_bytes=8192, extra_stages=True)  # the board-sized engine


def board_params(**params) -> EngineParams:
    return EngineParams(**{**BOARD_PARAMS, **params})


class SimBoard(wiring.Component):
    """The engine core with a host's UART pair on its pins: bytes in on `h2d`, bytes out on `d2h`."""

    def __init__(self, params: EngineParams, ram_bytes: int = RAM_BYTES):
        self.params, self.ram_bytes = params, ram_bytes
        super().__init__({
            "h2d_data": In(8), "h2d_valid": In(1), "h2d_ready": Out(1),
            "d2h_data": Out(8), "d2h_valid": Out(1), "d2h_ready": In(1),
        })

    def elaborate(self, platform):
        from fpga.cores.engine_core import EngineCore
        from fpga.cores.uart import UARTRx, UARTTx

        m = Module()
        baud = CLOCK_MHZ * 1e6 / UART_DIVISOR
        m.submodules.core = core = EngineCore(self.params, CLOCK_MHZ, baud=baud, ram_bytes=self.ram_bytes)
        m.submodules.host_tx = tx = UARTTx(UART_DIVISOR)
        m.submodules.host_rx = rx = UARTRx(UART_DIVISOR)
        m.d.comb += [
            core.rx.eq(tx.tx), rx.rx.eq(core.tx),
            tx.data.payload.eq(self.h2d_data), tx.data.valid.eq(self.h2d_valid), self.h2d_ready.eq(tx.data.ready),
            self.d2h_data.eq(rx.data.payload), self.d2h_valid.eq(rx.data.valid), rx.data.ready.eq(self.d2h_ready),
        ]
        return m


BOARD = Top("arkdma_board", SimBoard, sources=("rtl", "fpga/cores", "sim/board.py"), suffix="_board")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BoardSimulation:
    """A simulated board serving its line on 127.0.0.1:`port`; `url` is what a link connects to. With `once`
    the simulator stops when the first host that sent something closes its connection, else it serves one
    host after another until the process ends."""

    def __init__(self, params: EngineParams, console=None, root: Path = BUILD_ROOT, port: int | None = None,
                 once: bool = True):
        self.params, self.console, self.root, self.once = params, console, root, once
        self.port = port or _free_port()
        self.url = f"tcp://127.0.0.1:{self.port}"
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self, timeout_s: float = 120.0) -> BoardSimulation:
        model = build(self.params, console=self.console, root=self.root, top=BOARD)
        run_dir = self.root / "runs" / f"board-{self.port}"

        def simulate() -> None:
            try:
                run(model, "sim.board_session", run_dir,
                    env={PORT_ENV: str(self.port), ONCE_ENV: str(int(self.once))})
            except BaseException as exc:  # reported by wait() and by a connect that finds nobody
                self._error = exc

        self._thread = threading.Thread(target=simulate, name="board-simulation", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while True:  # the simulator listens once it has come out of reset
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1.0).close()
                return self
            except OSError:
                if self._error is not None or not self._thread.is_alive():
                    raise SimulationError(f"the simulated board did not start: {self._error}") from self._error
                if time.monotonic() > deadline:
                    raise SimulationError(f"the simulated board did not listen on {self.url} within {timeout_s:g} s; "
                                          f"see {run_dir / 'sim.log'}")
                time.sleep(0.05)

    def stop(self, timeout_s: float = 60.0) -> None:
        """Ends a `once` simulation whatever state its host left: a connection that sends one byte (the bridge
        answers '?') and hangs up, then the simulator's end."""
        if self._thread is None or not self._thread.is_alive():
            return self.wait(timeout_s)
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5.0) as s:
                s.sendall(b"?")
                s.recv(1)
        except OSError:
            pass  # it already stopped
        self.wait(timeout_s)

    def wait(self, timeout_s: float | None = 60.0) -> None:
        """After the last connection closed: the simulator's end, with its error if it failed (None: no limit)."""
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise SimulationError(f"the simulated board on {self.url} did not stop within {timeout_s:g} s")
        if self._error is not None:
            raise SimulationError(f"the simulated board failed: {self._error}") from self._error
