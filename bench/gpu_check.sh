#!/usr/bin/env bash
# On a GPU machine, in one go: install the checkout, run the whole test suite with GPU skips turned into
# failures, `arkdma bench dma`, `arkdma bench interference` and `arkdma demo`. Every step is bounded by
# its own timeout (tests and demo stay under 6 minutes; all four under 11); logs, JSON and plots go to OUTDIR, step times to
# OUTDIR/steps.txt. STEPs (default all: tests dma interference demo) pick some of them, e.g. the peer rows
# on a two-GPU machine: `bench/gpu_check.sh OUTDIR tests interference`. The runtime's steps, not in the default:
# runtime-tests (the loop-kernel GPU tests, one process, each test bounded), loop (`bench loop`), plan (`bench plan
# --runtime`), tune (`bench tune`), generate (examples/generate.py --tiny, batch 1 and 8), models (`bench models`,
# the default run: Llama-1B decode and prefill, BERT-Large, beside PyTorch; about 8 minutes, bounded at 10), comm
# (communication across GPUs: comm-tests, the World's GPU tests; comm-examples, examples/pipeline.py, data_parallel.py
# and tensor_parallel.py --tiny; comm-bench, `bench comm`, or comm-quick, `bench comm --quick`; each also a step of
# its own). On two GPUs with peer access rank r runs on GPU r and PyTorch's side on NCCL; on one GPU both ranks share
# it (a loopback).
#
#   bench/gpu_check.sh OUTDIR [STEP...]
#
# The gateware tests (tests/fpga) need the `hw` extra (Amaranth, Yosys); where it is not installed they
# are left out, and the log says so. Conformance on rtl skips by itself without Verilator/cocotb.
set -uo pipefail
out=${1:?usage: bench/gpu_check.sh OUTDIR [STEP...]}
shift
steps=" ${*:-tests dma interference demo} "
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
python=${PYTHON:-python3}
arkdma="$python -m arkdma_cli.main"

step() {  # step NAME SECONDS COMMAND...: runs COMMAND under a timeout, records its time and exit status
    local name=$1 limit=$2 t0=$SECONDS rc
    shift 2
    echo "== $name (at most ${limit} s)"
    timeout --kill-after=10 "$limit" "$@"
    rc=$?
    echo "$name: rc=$rc, $((SECONDS - t0)) s" | tee -a "$out/steps.txt"
    return $rc
}

{ nvidia-smi --query-gpu=name,driver_version,pci.bus_id,clocks.sm,clocks.max.sm --format=csv
  echo "CPUs: $(nproc)"; $python -V
  $python -c 'import torch, cupy; print("torch", torch.__version__, "cupy", cupy.__version__)'; } >"$out/machine.txt" 2>&1
cat "$out/machine.txt"

if ! step install 90 $python -m pip install --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1; then
    echo "pip install -e failed (install.log); building the native library in place instead"
    $python setup.py build_ext --inplace >>"$out/install.log" 2>&1 || { tail -30 "$out/install.log"; exit 1; }
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi

wants() { [[ $steps == *" $1 "* ]]; }

ignore=()
if wants tests && ! $python -c "import amaranth" 2>/dev/null; then
    ignore=(--ignore=tests/fpga)
    echo "tests/fpga left out: Amaranth is not installed here (the hw extra)" | tee "$out/tests.log"
fi
if wants tests; then
    ARKDMA_REQUIRE_GPU=1 step tests 300 $python -m pytest -q -rsfE -p no:cacheprovider -m "not slow" "${ignore[@]}" \
        tests >>"$out/tests.log" 2>&1
    grep -aE "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -25
fi

if wants runtime-tests; then
    # one process (every loop kernel is cooperative: two at once would wait for each other), each test bounded, so a
    # kernel that never leaves costs one test, not the run
    ARKDMA_REQUIRE_GPU=1 step runtime-tests 540 $python -m pytest -q -rsfE -p no:cacheprovider -n 0 -m gpu \
        --timeout=90 --timeout-method=thread tests/gpu tests/unit/test_examples.py >"$out/runtime_tests.log" 2>&1
    grep -aE "^(FAILED|ERROR)|passed|failed|Timeout" "$out/runtime_tests.log" | tail -25
fi

if wants loop; then
    step "bench loop" 420 $arkdma bench loop --json "$out/loop.json" --plot "$out/loop.png" >"$out/loop.log" 2>&1
    cut -c1-200 "$out/loop.log" | tail -20
fi

if wants plan; then
    step "bench plan" 120 $arkdma bench plan --runtime --json "$out/plan_scale.json" >"$out/plan_scale.log" 2>&1
    tail -8 "$out/plan_scale.log"
fi

if wants tune; then
    step "bench tune" 420 $arkdma bench tune --json "$out/tune.json" >"$out/tune.log" 2>&1
    tail -20 "$out/tune.log"
fi

if wants models; then
    step "bench models" 600 $arkdma bench models --json "$out/models.json" --plot "$out/models.png" \
        >"$out/models.log" 2>&1
    cut -c1-240 "$out/models.log" | tail -24
fi

if wants generate; then
    step generate 300 $python -m examples.generate --tiny --new 64 >"$out/generate.log" 2>&1
    step generate-batch 300 $python -m examples.generate --tiny --new 64 --batch 8 >>"$out/generate.log" 2>&1
    tail -8 "$out/generate.log"
fi

# NVLink multicast stays off in every process (the examples and bench comm set these too)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if wants comm || wants comm-tests; then
    ARKDMA_REQUIRE_GPU=1 step comm-tests 300 $python -m pytest -q -rsfE -p no:cacheprovider -n 0 -m gpu \
        --timeout=120 --timeout-method=thread tests/gpu/test_world.py >"$out/comm_tests.log" 2>&1
    grep -aE "^(FAILED|ERROR)|passed|failed|Timeout" "$out/comm_tests.log" | tail -15
fi

if wants comm || wants comm-examples; then
    for example in pipeline data_parallel tensor_parallel; do
        step "example $example" 240 $python -m "examples.$example" --tiny >"$out/comm_$example.log" 2>&1
        cut -c1-220 "$out/comm_$example.log" | tail -8
    done
fi

if wants comm || wants comm-bench || wants comm-quick; then
    quick=$(wants comm-quick && echo --quick)
    step "bench comm" 560 $arkdma bench comm $quick --json "$out/comm.json" --plot "$out/comm.png" \
        >"$out/comm.log" 2>&1
    cut -c1-220 "$out/comm.log" | tail -40
fi

if wants dma; then
    step "bench dma" 190 $arkdma bench dma --engine software --json "$out/dma.json" --plot "$out/dma.png" \
        >"$out/dma.log" 2>&1
    cut -c1-160 "$out/dma.log" | grep -av "^\s*$" | tail -15
fi

if wants interference; then
    step "bench interference" 90 $arkdma bench interference --json "$out/interference.json" \
        --plot "$out/interference.png" >"$out/interference.log" 2>&1
    cut -c1-200 "$out/interference.log" | tail -16
fi

if wants demo; then
    step demo 30 $arkdma demo --plot "$out/demo.png" --json "$out/demo.json" >"$out/demo.log" 2>&1
    cut -c1-160 "$out/demo.log" | tail -12
fi
cat "$out/steps.txt"
