"""The layers of DESIGN.md hold: import-linter's contracts (pyproject.toml) pass on the tree, break on a
tree that crosses them, and the CLI reaches the hardware side only inside its commands."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")


def lint(cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    if LINT is None:
        pytest.skip("lint-imports is missing: the test extra pins import-linter (pip install 'arkdma[test]' or ./dev)")
    return subprocess.run([LINT, "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_the_contracts_hold_on_this_tree():
    proc = lint(ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


RUNTIME = "the runtime library imports only the driver among the project's packages"
PLAYER = "the player plays scenarios and the workload; they never import the player"


@pytest.mark.parametrize(("offender", "line", "contract"), [
    ("driver/leak.py", "import ark_runtime.engines\n", "driver imports nothing above it"),
    ("driver/leak.py", "import host.engine\n", "driver imports nothing above it"),
    ("host/leak.py", "import sim.build\n", "host imports nothing above it"),
    ("rtl/leak.py", "from driver import device\n", "rtl imports only the ABI"),
    ("ark_runtime/leak.py", "import amaranth\n", RUNTIME),
    ("ark_runtime/leak.py", "def later():\n    import rtl.engine\n", RUNTIME),
    ("ark_runtime/leak.py", "import host.engine\n", RUNTIME),
    ("ark_runtime/leak.py", "from bench import loop\n", RUNTIME),
    ("ark_runtime/leak.py", "def later():\n    import arkdma_cli.main\n", RUNTIME),
    ("host/leak.py", "import bench.loop\n", "only the arkdma command imports the benchmarks"),
    ("sim/leak.py", "def later():\n    import bench.loop\n", "only the arkdma command imports the benchmarks"),
    ("examples/leak.py", "import bench.loop\n", "only the arkdma command imports the benchmarks"),
    ("bench/leak.py", "from arkdma_cli import main\n", "nothing imports the arkdma command"),
    ("sim/leak.py", "import arkdma_cli.main\n", "nothing imports the arkdma command"),
    ("driver/scenario/__init__.py", "def play():\n    from driver import player\n", PLAYER),
    ("driver/workload/__init__.py", "import driver.player\n", PLAYER),
])
def test_a_crossing_import_breaks_a_contract(tmp_path, offender, line, contract):
    """The project's own contracts, on a skeleton of its packages with one import that crosses a layer."""
    skeleton(tmp_path)
    (tmp_path / offender).write_text(line)
    proc = lint(tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode != 0, proc.stdout
    assert contract in proc.stdout and "BROKEN" in proc.stdout


def test_the_skeleton_without_a_crossing_keeps_every_contract(tmp_path):
    """The imports the layers allow (the command and the benchmarks reaching down, the player importing what it
    plays) keep every contract, so each break above is the crossing's."""
    skeleton(tmp_path)
    proc = lint(tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout
    assert "0 broken" in proc.stdout


def skeleton(tmp_path: Path) -> None:
    """Every package and module the contracts name, empty but for the imports the layers allow."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    for package in config["root_packages"]:
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    named = {m for c in config["contracts"] for m in c.get("forbidden_modules", []) + c["source_modules"]}
    internal = {m for m in named if m.split(".")[0] in config["root_packages"]}
    for module in internal | {"host.engine", "sim.build", "ark_runtime.engines", "rtl.engine", "driver.device",
                              "bench.loop", "arkdma_cli.main"}:
        path = tmp_path.joinpath(*module.split("."))
        path.mkdir(parents=True, exist_ok=True)
        (path / "__init__.py").touch()
    (tmp_path / "amaranth").mkdir(exist_ok=True)
    (tmp_path / "amaranth" / "__init__.py").touch()
    # allowed: a command reaching the hardware side and the benchmarks, the benchmarks reaching all but the
    # command, the player importing what it plays
    (tmp_path / "bench/ok.py").write_text("import ark_runtime.engines\nimport host.engine\nimport sim.build\n")
    (tmp_path / "arkdma_cli/ok.py").write_text("import bench.loop\n\ndef run():\n    import rtl.engine\n")
    (tmp_path / "driver/player/__init__.py").write_text("import driver.scenario\nimport driver.workload\n")
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())


def test_the_cli_imports_no_hardware_side_until_a_command_runs():
    code = ("import sys; from arkdma_cli.main import build_parser; build_parser(); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('amaranth', 'cocotb', 'cocotb_tools', "
            "'cocotbext', 'sim') or m in ('rtl.engine',)); print(bad)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", f"building the CLI imported {proc.stdout.strip()}"


def test_no_runtime_module_names_the_simulator_in_a_string():
    for path in (ROOT / "ark_runtime").rglob("*.py"):
        text = path.read_text()
        assert '"sim.' not in text and "'sim." not in text, f"{path} names a sim module"


def test_engines_are_found_from_a_checkout_that_was_not_installed():
    from ark_runtime import engines

    registered = engines._from_checkout()
    assert [n for n in registered if n in engines.PREFERENCE] == list(engines.PREFERENCE)
    # the board engines are registered but never chosen by default: they rank after the reference engine
    assert [n for n in registered if n not in engines.PREFERENCE] == ["card-uart", "card-uart-sim", "card-sim"]
    assert engines.known()[len(engines.PREFERENCE):] == ["card-sim", "card-uart", "card-uart-sim"]
    assert all(ep.group == engines.ENTRY_POINT_GROUP and ":" in ep.value for ep in registered.values())
