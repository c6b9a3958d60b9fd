"""The cocotb module of the simulated board (sim/board.py): serves the core's serial line on a TCP port.

Frames from the host go onto the line as UART bytes once whole (the bridge drops a frame whose bytes stall,
and simulated time stands still while the host thinks); the bridge's reply bytes go back as they come off
the line. Hosts are served one after another; with ARKDMA_BOARD_ONCE=1 the simulation ends when the first
host that sent something closes its connection.
"""

from __future__ import annotations

import os
import select
import socket

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge, Timer

from fpga.link.bridge_protocol import OP_READ, OP_WRITE, READ_REPLY_BYTES, WRITE_REPLY_BYTES
from sim.board import CLOCK_MHZ, ONCE_ENV, PORT_ENV, UART_DIVISOR

BYTE_CYCLES = 10 * UART_DIVISOR
PERIOD_PS = round(1e6 / CLOCK_MHZ)
# The longest a reply may take: a BAR access the engine leaves unanswered times out after 65,536 cycles
# (fpga/cores/engine_core.py), then the reply's bytes.
REPLY_CYCLES = (1 << 16) + 64 * BYTE_CYCLES


def frame_shape(op: int) -> tuple[int, int]:
    """Bytes of the frame that starts with `op`, and bytes of its reply."""
    if op == OP_WRITE:
        return 9, WRITE_REPLY_BYTES
    if op == OP_READ:
        return 5, READ_REPLY_BYTES
    return 1, 1


class Line:
    def __init__(self, dut):
        self.dut = dut
        self.replies: bytearray = bytearray()
        dut.h2d_valid.value = 0
        dut.d2h_ready.value = 1
        cocotb.start_soon(self._collect())

    async def _collect(self) -> None:
        while True:
            await RisingEdge(self.dut.d2h_valid)
            await ReadOnly()
            self.replies.append(int(self.dut.d2h_data.value))

    async def send(self, data: bytes) -> None:
        """Each byte offered on a falling edge (inputs settle away from the rising edge that takes them)."""
        dut = self.dut
        for byte in data:
            await FallingEdge(dut.clk)
            while not int(dut.h2d_ready.value):
                await FallingEdge(dut.clk)
            dut.h2d_data.value = byte
            dut.h2d_valid.value = 1
            await FallingEdge(dut.clk)  # the rising edge before this one took the byte
            dut.h2d_valid.value = 0
            await Timer((BYTE_CYCLES - 1) * PERIOD_PS, unit="ps")  # one wake-up, not one per cycle

    async def receive(self, count: int) -> bytes:
        waited = 0
        while len(self.replies) < count and waited < REPLY_CYCLES:
            await Timer(BYTE_CYCLES * PERIOD_PS, unit="ps")
            waited += BYTE_CYCLES
        out = bytes(self.replies[:count])
        del self.replies[:count]
        return out


async def serve(line: Line, conn: socket.socket) -> bool:
    """Frames of one connection until it closes; whether it sent anything."""
    pending = bytearray()
    sent = False
    while True:
        while pending:
            length, reply = frame_shape(pending[0])
            if len(pending) < length:
                break
            frame, pending = bytes(pending[:length]), pending[length:]
            await line.send(frame)
            answer = await line.receive(reply)
            if answer:
                conn.sendall(answer)
        select.select([conn], [], [])  # simulated time stands still until the host sends
        chunk = conn.recv(4096)
        if not chunk:
            return sent
        sent = True
        pending += chunk


@cocotb.test()
async def board(dut):
    cocotb.start_soon(Clock(dut.clk, PERIOD_PS, unit="ps").start())
    line = Line(dut)
    dut.rst.value = 1
    await ClockCycles(dut.clk, 8)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 8)
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", int(os.environ[PORT_ENV])))
        server.listen(1)
        while True:
            conn, _ = server.accept()
            with conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if await serve(line, conn) and os.environ.get(ONCE_ENV) == "1":
                    return
