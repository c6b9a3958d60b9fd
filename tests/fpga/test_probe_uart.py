"""`arkdma fpga probe` over the UART: the port from ARKDMA_CARD_UART when --port is not given, and --json."""

from __future__ import annotations

import json

from driver.abi import DEVICE_MAGIC, GLOBAL
from tests.fpga.test_serial_link import BridgeModel, pty_pair  # noqa: F401 (pty_pair is a fixture)


def test_uart_probe_port_from_the_environment_and_json(pty_pair, tmp_path, monkeypatch, capsys):  # noqa: F811
    from arkdma_cli.main import main

    master, path = pty_pair
    BridgeModel(master, {GLOBAL.address("ID"): DEVICE_MAGIC, GLOBAL.address("SLOTS"): 16}).start()
    monkeypatch.setenv("ARKDMA_CARD_UART", path)
    out_file = tmp_path / "probe.json"
    assert main(["fpga", "probe", "--json", str(out_file)]) == 0
    assert "SLOTS 0x00000010" in capsys.readouterr().out
    data = json.loads(out_file.read_text())
    assert data["link"] == "uart" and data["port"] == path
    assert data["identity"]["core"] == "engine" and data["identity"]["ID"] == DEVICE_MAGIC
