"""SerialLink over a pseudo-terminal, with a Python model of the bridge on the far end."""

from __future__ import annotations

import os
import struct
import threading

import pytest

from driver.abi import Resp
from fpga.link.bridge_protocol import OP_READ, OP_WRITE, BridgeError
from fpga.link.serial_link import SerialLink


class BridgeModel(threading.Thread):
    """Answers frames from a dict of words; addresses >= 0x8000_0000 answer DECERR; `mute` answers nothing."""

    def __init__(self, fd: int, words: dict[int, int], mute: bool = False):
        super().__init__(daemon=True)
        self.fd, self.words, self.mute = fd, words, mute

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = os.read(self.fd, n - len(out))
            if not chunk:
                raise EOFError
            out += chunk
        return out

    def run(self) -> None:
        try:
            while True:
                op = self._read(1)[0]
                addr = struct.unpack("<I", self._read(4))[0]
                resp = Resp.DECERR if addr >= 0x8000_0000 else Resp.OKAY
                if op == OP_WRITE:
                    value = struct.unpack("<I", self._read(4))[0]
                    if resp == Resp.OKAY:
                        self.words[addr] = value
                    reply = bytes([resp])
                else:
                    assert op == OP_READ
                    reply = bytes([resp]) + struct.pack("<I", self.words.get(addr, 0))
                if not self.mute:
                    os.write(self.fd, reply)
        except (EOFError, OSError):
            return


@pytest.fixture
def pty_pair():
    """A pty's master (for the bridge model) and its slave's path. On the way out the slave closes first,
    so the model's read ends, and the model is joined before the master closes: a model left reading a
    closed fd number could otherwise answer the next test's pty, which reuses it."""
    master, slave = os.openpty()
    before = set(threading.enumerate())
    yield master, os.ttyname(slave)
    os.close(slave)
    for t in set(threading.enumerate()) - before:
        if isinstance(t, BridgeModel):
            t.join(timeout=5)
    os.close(master)


def test_words_round_trip_over_the_link(pty_pair):
    master, path = pty_pair
    words = {}
    BridgeModel(master, words).start()
    with SerialLink(path, 115200, timeout_s=2.0) as link:
        link.write32(0x24, 0xDEAD_BEEF)
        assert link.read32(0x24) == 0xDEAD_BEEF
        assert link.read32(0x28) == 0
        with pytest.raises(BridgeError, match="answered DECERR"):
            link.read32(0x9000_0000)
    assert words == {0x24: 0xDEAD_BEEF}


def test_silence_is_a_bounded_error(pty_pair):
    master, path = pty_pair
    BridgeModel(master, {}, mute=True).start()
    with SerialLink(path, 115200, timeout_s=0.2) as link, pytest.raises(BridgeError, match="no answer.*0.2 s"):
        link.read32(0)


def test_bad_device_and_baud_are_clear_errors(tmp_path):
    with pytest.raises(BridgeError, match="cannot open"):
        SerialLink(tmp_path / "ttyUSB9")
    with pytest.raises(BridgeError, match="baud 12345"):
        SerialLink(tmp_path / "ttyUSB9", 12345)


def test_probe_and_peek_poke_commands(pty_pair, capsys):
    from arkdma_cli.main import main
    from driver.abi import DEVICE_MAGIC, GLOBAL

    master, path = pty_pair
    words = {GLOBAL.address("ID"): DEVICE_MAGIC, GLOBAL.address("NUM_QUEUES"): 4}
    BridgeModel(master, words).start()
    assert main(["fpga", "probe", "--port", path]) == 0
    out = capsys.readouterr().out
    assert "engine" in out and f"{DEVICE_MAGIC:#010x}" in out and "NUM_QUEUES 0x00000004" in out
    assert main(["fpga", "poke", "--port", path, "0x80000010", "0x1234"]) == 1  # DECERR in the model
    assert "answered DECERR" in capsys.readouterr().err
    assert main(["fpga", "poke", "--port", path, "0x10", "0x1234"]) == 0
    assert main(["fpga", "peek", "--port", path, "0x10", "0x14"]) == 0
    assert capsys.readouterr().out.split() == ["0x00000010", "0x00001234", "0x00000014", "0x00000000"]


class SocketEnd:
    """The far end of a TCP link: one connection accepted and answered by BridgeModel."""

    def __init__(self, words: dict[int, int], mute: bool = False, hang_up: bool = False):
        import socket

        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(1)
        self.url = f"tcp://127.0.0.1:{self.server.getsockname()[1]}"
        self.words, self.mute, self.hang_up = words, mute, hang_up
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        if self.hang_up:
            conn.recv(16)
            conn.close()
            return
        BridgeModel(conn.fileno(), self.words, self.mute).run()
        conn.close()

    def close(self) -> None:
        self.server.close()


def test_words_round_trip_over_tcp():
    words = {}
    end = SocketEnd(words)
    with SerialLink(end.url, timeout_s=2.0) as link:
        link.write32(0x40, 0x0BAD_F00D)
        assert link.read32(0x40) == 0x0BAD_F00D
        with pytest.raises(BridgeError, match="answered DECERR"):
            link.write32(0x8000_0000, 1)
    end.close()
    assert words == {0x40: 0x0BAD_F00D}


def test_tcp_link_errors_are_clear():
    with pytest.raises(BridgeError, match="not tcp://HOST:PORT"):
        SerialLink("tcp://nowhere")
    import socket

    with socket.socket() as unused:  # a port nobody listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(BridgeError, match="cannot reach .*is the simulated board"):
        SerialLink(f"tcp://127.0.0.1:{port}", timeout_s=0.5)
    quiet = SocketEnd({}, mute=True)
    with SerialLink(quiet.url, timeout_s=0.2) as link, pytest.raises(BridgeError, match="no answer.*0.2 s"):
        link.read32(0)
    gone = SocketEnd({}, hang_up=True)
    with SerialLink(gone.url, timeout_s=2.0) as link, pytest.raises(BridgeError, match="closed the connection"):
        link.read32(0)
