#!/usr/bin/env bash
# On a GPU machine: builds the software engine, runs its CUDA-executor tests, the conformance suite
# on software-cuda and the CPU-only tests, then the CPU-side benchmark. Logs and JSON go to OUTDIR.
#
#   bench/software_engine_gpu_check.sh OUTDIR [--quick]
set -uo pipefail
out=${1:?usage: bench/software_engine_gpu_check.sh OUTDIR [--quick]}
shift
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
python=${PYTHON:-python3}

{ nvidia-smi --query-gpu=name,driver_version,pci.bus_id,clocks.sm,clocks.mem --format=csv; nproc; $python -V; } \
    >"$out/machine.txt" 2>&1
cat "$out/machine.txt"
if ! $python -m pip install --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1; then
    echo "pip install -e failed (log: install.log); building the native library in place instead"
    $python setup.py build_ext --inplace >>"$out/install.log" 2>&1 || { tail -30 "$out/install.log"; exit 1; }
fi

echo "== CUDA executor tests and conformance on software-cuda"
$python -m pytest -q -rs -p no:cacheprovider tests/gpu/test_software_cuda_executor.py tests/conformance \
    -k "software_cuda or software-cuda" >"$out/gpu_tests.log" 2>&1
tail -15 "$out/gpu_tests.log"
echo "== CPU-only tests (host executor, fake-driver run, conformance on software-host)"
$python -m pytest -q -p no:cacheprovider tests/host tests/conformance -k "not software-cuda" >"$out/ci_tests.log" 2>&1
tail -3 "$out/ci_tests.log"
echo "== CPU-side benchmark"
$python bench/software_engine_host_side.py --json "$out/software_engine_host_side.json" \
    --plot "$out/software_engine_host_side.png" "$@" >"$out/bench.log" 2>&1
cut -c1-150 "$out/bench.log"
