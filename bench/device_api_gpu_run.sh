#!/usr/bin/env bash
# On a GPU machine: installs the checkout, runs the device API's GPU tests and the driver/bench CPU tests,
# then `arkdma bench dma` and `arkdma bench interference`. Logs, JSON and plots go to OUTDIR (8 files).
#
#   bench/device_api_gpu_run.sh OUTDIR [--quick]
set -uo pipefail
out=${1:?usage: bench/device_api_gpu_run.sh OUTDIR [--quick]}
quick=${2:-}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
python=${PYTHON:-python3}

{ nvidia-smi --query-gpu=name,driver_version,pci.bus_id,clocks.sm,clocks.max.sm --format=csv; nproc; $python -V;
  $python -c 'import torch, cupy; print("torch", torch.__version__, "cupy", cupy.__version__)'; } >"$out/machine.txt" 2>&1
cat "$out/machine.txt"
if ! $python -m pip install --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1; then
    echo "pip install -e failed; building the native library in place"
    $python setup.py build_ext --inplace >>"$out/install.log" 2>&1 || { tail -30 "$out/install.log"; exit 1; }
fi
rm -f "$out/install.log"

echo "== GPU tests (device API) and CPU tests (driver, bench)"
timeout ${T_TESTS:-150} $python -m pytest -q -rs -p no:cacheprovider tests/gpu/test_device_api.py tests/driver tests/bench \
    >"$out/tests.log" 2>&1
tail -25 "$out/tests.log"

echo "== arkdma bench dma"
timeout ${T_DMA:-300} $python -m ark_runtime.cli.main bench dma $quick --json "$out/dma.json" --plot "$out/dma.png" \
    >"$out/dma.log" 2>&1
cut -c1-160 "$out/dma.log" | grep -v "^\s*$" | tail -80

echo "== arkdma bench interference"
timeout ${T_INTF:-120} $python -m ark_runtime.cli.main bench interference $quick --json "$out/interference.json" \
    --plot "$out/interference.png" >"$out/interference.log" 2>&1
cut -c1-200 "$out/interference.log" | tail -20
