"""Nonsense at the command line gets one clear line and a non-zero exit, before any work starts: usage
errors exit 2 (argparse), runtime errors 1, Ctrl-C 130 with a short "interrupted"."""

from __future__ import annotations

import json

import pytest

from ark_runtime import engines
from arkdma_cli import info
from arkdma_cli.main import INTERRUPTED, RUNTIME_ERROR, USAGE_ERROR, main
from driver.errors import EngineUnavailable


def usage_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == USAGE_ERROR
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("arkdma ")


def test_output_paths_are_checked_before_the_run(tmp_path, capsys):
    assert "is a directory" in usage_error(["demo", "--engine", "reference", "--plot", str(tmp_path)], capsys)
    assert "is a directory" in usage_error(["demo", "--json", str(tmp_path) + "/"], capsys)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert "is a file, not a folder" in usage_error(["demo", "--json", str(blocker / "x.json")], capsys)
    assert "is a directory" in usage_error(["sim", "bench", "--json", str(tmp_path)], capsys)
    assert "is a directory" in usage_error(["rtl", "verilog", "-o", str(tmp_path)], capsys)


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e30", "fast"])
def test_clock_must_be_a_finite_positive_number(value, capsys):
    assert "clock in MHz" in usage_error(["sim", "bench", "--json", "out/x.json", "--clock-mhz", value], capsys)


@pytest.mark.parametrize("argv,words", [
    (["fpga", "probe", "--port", "/dev/ttyUSB9", "--timeout", "1e30"], "wait per access"),
    (["fpga", "probe", "--port", "/dev/ttyUSB9", "--timeout", "nan"], "wait per access"),
    (["fpga", "poke", "--port", "/dev/ttyUSB9", "-5", "1"], "32-bit bus address"),
    (["fpga", "poke", "--port", "/dev/ttyUSB9", "0x10", "0x1_0000_0000"], "32-bit value"),
    (["fpga", "peek", "--port", "/dev/ttyUSB9", "0x1_0000_0000"], "32-bit bus address"),
    (["rtl", "verilog", "-o", "out/x.v", "--name", "1 bad name"], "not a Verilog module name"),
    (["fpga", "build", "--timeout", "inf"], "time in seconds"),
    (["sim", "waves", "/does/not/exist.vcd"], "does not exist"),
    (["sim", "board", "--port", "80"], "TCP port"),
    (["sim", "board", "--slots", "0"], "positive"),
])
def test_hostile_values_are_usage_errors(argv, words, capsys):
    assert words in usage_error(argv, capsys)


def test_a_port_that_is_not_a_serial_device_is_one_line(capsys):
    assert main(["fpga", "probe", "--port", "/dev/null"]) == RUNTIME_ERROR
    err = capsys.readouterr().err
    assert "not a serial device" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_board_nobody_serves_is_one_line(capsys):
    import socket

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    assert main(["fpga", "probe", "--port", f"tcp://127.0.0.1:{port}"]) == RUNTIME_ERROR
    err = capsys.readouterr().err
    assert "cannot reach" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_board_geometry_the_engine_refuses_is_one_line(capsys):
    pytest.importorskip("amaranth")
    assert main(["sim", "board", "--slots", "3"]) == RUNTIME_ERROR
    err = capsys.readouterr().err
    assert "board settings rejected" in err and "slots" in err and "Traceback" not in err


def test_a_file_that_is_not_a_vcd_is_one_line(tmp_path, capsys):
    junk = tmp_path / "junk.vcd"
    junk.write_bytes(b"\x00\x01 this is not a waveform\n" * 10)
    pytest.importorskip("vcdvcd")
    assert main(["sim", "waves", str(junk)]) == RUNTIME_ERROR
    err = capsys.readouterr().err
    assert err.startswith("arkdma sim:") and "Traceback" not in err


def _needs_simulator():
    from sim.toolchain import missing

    if missing():
        pytest.skip(f"cannot simulate here: {missing()}")


def test_absurd_simulated_work_is_refused_before_it_starts(capsys):
    _needs_simulator()
    assert main(["sim", "bench", "--json", "out/never.json", "--total-bytes", str(1 << 40)]) == RUNTIME_ERROR
    assert "would simulate" in capsys.readouterr().err
    assert main(["sim", "bench", "--json", "out/never.json", "--sizes", "1073741824"]) == RUNTIME_ERROR
    assert "would simulate" in capsys.readouterr().err


def test_absurd_demo_work_is_refused_before_it_starts(capsys):
    _needs_simulator()
    assert main(["demo", "--engine", "rtl", "--sizes", "1073741824"]) == RUNTIME_ERROR
    captured = capsys.readouterr()
    assert "more than engine rtl should take" in captured.err + captured.out


def test_ctrl_c_is_a_short_interrupted(monkeypatch, capsys):
    def interrupted(args, console=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(info, "run", interrupted)
    assert main(["info"]) == INTERRUPTED
    assert capsys.readouterr().err.strip() == "arkdma info: interrupted"


def test_info_json_is_one_object_with_the_choice(capsys):
    assert main(["info", "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert {e["name"] for e in facts["engines"]} == set(engines.known())
    assert facts["best_engine"] == engines.best()
    assert facts["gpus"] or "no NVIDIA driver or GPU" in facts["gpus_missing_why"] or facts["gpus_missing_why"]


def test_without_a_driver_the_reason_is_no_driver_not_an_old_one():
    from driver import discovery

    found, why = discovery.gpus()
    if found or discovery.nvidia_driver_missing() is None:
        pytest.skip("an NVIDIA driver is here")
    assert why.startswith("no NVIDIA driver or GPU") and "insufficient" not in why


def test_the_demo_says_which_engine_and_why(capsys, tmp_path):
    assert main(["demo", "--engine", "reference", "--sizes", "64", "--bytes-per-size", "4096",
                 "--plot", str(tmp_path / "d.png")]) == 0
    assert "running on engine 'reference' (asked for with --engine)" in capsys.readouterr().out


def test_choice_explains_every_engine_passed_over():
    choice = engines.choose()
    assert choice.name == engines.best()
    names = [n for n, _ in choice.passed_over]
    assert names == engines.known()[: engines.known().index(choice.name)]
    assert all(reason for _, reason in choice.passed_over)


@pytest.mark.parametrize("name", ["", "   ", 3])
def test_open_engine_refuses_an_empty_name(name):
    with pytest.raises(EngineUnavailable, match="empty or not a string"):
        engines.open_engine(name)


def test_open_engine_and_choose_agree():
    backend = engines.open_engine()
    try:
        assert backend.name == engines.choose(in_process=True).name
    finally:
        backend.close()
