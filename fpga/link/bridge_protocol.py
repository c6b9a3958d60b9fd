"""The host's side of the UART bridge protocol (fpga/cores/uart_bridge.py): frames out, replies in."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from driver.abi import Resp
from fpga.errors import FpgaFlowError

OP_WRITE = ord("W")
OP_READ = ord("R")
REPLY_UNKNOWN = ord("?")
SCRATCH_ID_WORD = 0x41524B31  # "ARK1": what the scratch core answers at address 0 (the engine answers DEVICE_MAGIC)
WRITE_REPLY_BYTES = 1
READ_REPLY_BYTES = 5


class BridgeError(FpgaFlowError):
    """The bridge answered with an error response or something that is not a reply."""


@dataclass(frozen=True)
class Reply:
    resp: Resp
    data: int = 0


def _check_word(name: str, value: int) -> None:
    if not 0 <= value < 1 << 32:
        raise ValueError(f"{name} must fit in 32 bits, not {value:#x}")


def write_frame(addr: int, data: int) -> bytes:
    _check_word("address", addr)
    _check_word("data", data)
    return struct.pack("<BII", OP_WRITE, addr, data)


def read_frame(addr: int) -> bytes:
    _check_word("address", addr)
    return struct.pack("<BI", OP_READ, addr)


def parse_reply(raw: bytes, read: bool) -> Reply:
    want = READ_REPLY_BYTES if read else WRITE_REPLY_BYTES
    if len(raw) != want:
        raise BridgeError(f"the bridge answered {len(raw)} bytes ({raw.hex()}) where a {'read' if read else 'write'} "
                          f"gets {want}: check the baud rate, or wait a frame timeout and retry")
    if raw[0] > Resp.DECERR:
        raise BridgeError(f"the bridge answered {raw.hex()}, which is no response code: "
                          "the line is out of step; wait a frame timeout and retry")
    return Reply(Resp(raw[0]), struct.unpack("<I", raw[1:])[0] if read else 0)
