"""SerialLink: the host end of the UART bridge on a serial device (termios, no extra package) or on a TCP
byte stream (`tcp://host:port`: a simulated board, or a board's serial port served over the network), each
access bounded."""

from __future__ import annotations

import os
import select
import socket
import termios
import time
import tty
from pathlib import Path

from driver.abi import DEVICE_MAGIC, GLOBAL, Resp
from fpga.link.bridge_protocol import (READ_REPLY_BYTES, SCRATCH_ID_WORD, WRITE_REPLY_BYTES, BridgeError, parse_reply,
                                       read_frame, write_frame)

BAUD_CONSTANTS = {rate: getattr(termios, f"B{rate}") for rate in (9600, 19200, 38400, 57600, 115200, 230400,
                                                                   460800, 921600, 1000000, 2000000, 3000000)
                  if hasattr(termios, f"B{rate}")}


TCP_PREFIX = "tcp://"


class SerialLink:
    """Reads and writes 32-bit words through the bridge; raises BridgeError on an error response or silence."""

    def __init__(self, device: str | Path, baud: int = 115200, timeout_s: float = 1.0):
        self.device, self.timeout_s = str(device), timeout_s
        self._socket = None
        if self.device.startswith(TCP_PREFIX):
            self._connect(self.device[len(TCP_PREFIX):])
            return
        if baud not in BAUD_CONSTANTS:
            raise BridgeError(f"baud {baud} is not one this system's serial driver offers; "
                              f"use one of {', '.join(map(str, BAUD_CONSTANTS))}")
        try:
            self.fd = os.open(device, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError as exc:
            raise BridgeError(f"cannot open {device}: {exc.strerror}; is the board's FTDI cable plugged in, and "
                              "may this user open it (group dialout)?") from exc
        if not os.isatty(self.fd):
            os.close(self.fd)
            raise BridgeError(f"{device} is not a serial device (a tty); give the board's port, e.g. /dev/ttyUSB1")
        tty.setraw(self.fd)
        attrs = termios.tcgetattr(self.fd)
        attrs[4] = attrs[5] = BAUD_CONSTANTS[baud]  # ispeed, ospeed
        termios.tcsetattr(self.fd, termios.TCSANOW, attrs)
        termios.tcflush(self.fd, termios.TCIOFLUSH)

    def _connect(self, where: str) -> None:
        host, _, port = where.rpartition(":")
        if not host or not port.isdigit():
            raise BridgeError(f"{self.device!r} is not tcp://HOST:PORT")
        try:
            self._socket = socket.create_connection((host, int(port)), timeout=self.timeout_s)
        except OSError as exc:
            raise BridgeError(f"cannot reach {self.device}: {exc}; is the simulated board (or the serial "
                              "server) running there?") from exc
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket.setblocking(False)
        self.fd = self._socket.fileno()

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
        else:
            os.close(self.fd)

    def __enter__(self) -> SerialLink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _exchange(self, frame: bytes, reply_bytes: int) -> bytes:
        os.write(self.fd, frame)
        out = bytearray()
        deadline = time.monotonic() + self.timeout_s
        while len(out) < reply_bytes:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise BridgeError(f"no answer from the bridge on {self.device} within {self.timeout_s:g} s "
                                  f"({len(out)} of {reply_bytes} bytes came): is the bitstream loaded, the baud "
                                  "rate the one it was built with, and the board's UART jumpers set?")
            chunk = os.read(self.fd, reply_bytes - len(out))
            if not chunk:
                raise BridgeError(f"{self.device} closed the connection ({len(out)} of {reply_bytes} bytes came)")
            out += chunk
        return bytes(out)

    def read32(self, addr: int) -> int:
        reply = parse_reply(self._exchange(read_frame(addr), READ_REPLY_BYTES), read=True)
        if reply.resp != Resp.OKAY:
            raise BridgeError(f"reading {addr:#010x} answered {reply.resp.name}")
        return reply.data

    def write32(self, addr: int, value: int) -> None:
        reply = parse_reply(self._exchange(write_frame(addr, value), WRITE_REPLY_BYTES), read=False)
        if reply.resp != Resp.OKAY:
            raise BridgeError(f"writing {addr:#010x} answered {reply.resp.name}")


def probe(link: SerialLink) -> dict[str, int | str]:
    """What answers on the link: the engine core (its identity registers) or the scratch core."""
    first = link.read32(0)
    if first == SCRATCH_ID_WORD:
        return {"core": "scratch", "id": f"{first:#010x}"}
    if first != DEVICE_MAGIC:
        raise BridgeError(f"address 0 reads {first:#010x}, neither the engine's ID ({DEVICE_MAGIC:#010x}) nor "
                          f"the scratch core's ({SCRATCH_ID_WORD:#010x}): is this the right board and bitstream?")
    out: dict[str, int | str] = {"core": "engine"}
    for name in ("ID", "VERSION", "CAPS", "NUM_QUEUES", "SLOTS", "NUM_REGIONS", "DATA_BYTES", "WINDOW_BASE",
                 "WINDOW_STRIDE", "STATUS", "CYCLES_LO", "DESCRIPTORS_LO", "BYTES_LO"):
        out[name] = link.read32(GLOBAL.address(name))
    return out
