"""The CUDA executor in CI: its GPU tests and the conformance suite, run in a subprocess against the
CUDA driver test double (tests/host/fake_cuda/), whose streams finish operations out of order; and
the reasons software-cuda gives when the driver, a GPU or a needed feature is missing."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE_SOURCE = Path(__file__).parent / "fake_cuda" / "fake_libcuda.cpp"


@pytest.fixture(scope="module")
def fake_libcuda() -> Path:
    """The test double, compiled once per source version into build/ (ignored by git)."""
    digest = hashlib.sha256(FAKE_SOURCE.read_bytes()).hexdigest()[:16]
    out = ROOT / "build" / "fake_cuda" / digest / "libfakecuda.so"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        cxx = os.environ.get("CXX", "c++")
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run([cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-fvisibility=hidden", "-pthread",
                        str(FAKE_SOURCE), "-o", str(tmp)], check=True)
        tmp.replace(out)
    return out


def run_python(args: list[str], env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    # The child runs on the test double, not a GPU: the GPU machine's "GPU skips fail" rule does not apply.
    parent = {k: v for k, v in os.environ.items() if k != "ARKDMA_REQUIRE_GPU"}
    full = {**parent, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=timeout)


def test_cuda_executor_tests_and_conformance_pass_on_the_fake_driver(fake_libcuda):
    proc = run_python(
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu/test_software_cuda_executor.py",
         "tests/conformance", "-k", "software_cuda or software-cuda"],
        {"ARKDMA_LIBCUDA": str(fake_libcuda), "ARKDMA_FAKE_CUDA_JITTER_US": "30"},
    )
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert passed >= 65, f"too few CUDA-executor tests ran on the fake driver: {summary}"


PROBE = "from host.provider import CudaProvider; print(CudaProvider().unavailable_reason())"


def test_software_cuda_says_when_the_driver_is_missing(tmp_path):
    proc = run_python(["-c", PROBE], {"ARKDMA_LIBCUDA": str(tmp_path / "libcuda.so.1")})
    assert "needs an NVIDIA driver" in proc.stdout and "software-host" in proc.stdout, proc.stdout + proc.stderr


def test_software_cuda_says_when_there_is_no_gpu(fake_libcuda):
    proc = run_python(["-c", PROBE], {"ARKDMA_LIBCUDA": str(fake_libcuda), "ARKDMA_FAKE_CUDA_DEVICES": "0"})
    assert "no CUDA GPU found" in proc.stdout, proc.stdout + proc.stderr


def test_software_cuda_needs_64_bit_stream_writes(fake_libcuda):
    script = "from host.engine import SoftwareEngine\ntry:\n    SoftwareEngine('cuda')\nexcept Exception as e:\n    print(type(e).__name__, e)"
    proc = run_python(["-c", script], {"ARKDMA_LIBCUDA": str(fake_libcuda), "ARKDMA_FAKE_CUDA_MEM_OPS": "0"})
    assert "EngineUnavailable" in proc.stdout and "CAN_USE_64_BIT_STREAM_MEM_OPS" in proc.stdout, proc.stdout + proc.stderr


def test_software_host_says_when_the_library_is_not_built(monkeypatch, tmp_path):
    from host import native
    from host.provider import HostProvider

    monkeypatch.setattr(native, "LIBRARY", tmp_path / "libarkdma_engine.so")
    reason = HostProvider().unavailable_reason()
    assert "not built" in reason and "pip install -e ." in reason


def test_demo_on_software_cuda_offloads_gpu_memory_to_host(fake_libcuda, tmp_path):
    out = tmp_path / "demo.json"
    proc = run_python(
        ["-m", "arkdma_cli.main", "demo", "--engine", "software-cuda", "--sizes", "64,4096,65536",
         "--bytes-per-size", "262144", "--plot", str(tmp_path / "demo.png"), "--json", str(out)],
        {"ARKDMA_LIBCUDA": str(fake_libcuda), "ARKDMA_FAKE_CUDA_JITTER_US": "30", "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    assert "copies from GPU memory to host memory" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [r["bytes"] for r in rows] == [64, 4096, 65536] and all(r["verified"] for r in rows)
