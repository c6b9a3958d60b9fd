#!/bin/bash
# A/B of case f: base tree (TREES/base) against the working tree, alternating, three rounds each.
set -u
cd "$(dirname "$0")/.."
python3 -m pip install --no-deps --no-build-isolation -e . > $OUT/pip.log 2>&1 || { tail -20 $OUT/pip.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
cat $OUT/gpu.txt; python3 -c "import matplotlib, hypothesis; print(matplotlib.__version__)" 2>&1 | tail -1
for r in 1 2 3; do
  for v in base new gpufence; do
    case $v in base) pp=$PWD/TREES/base;; new) pp=$PWD;; *) pp=$PWD/TREES/$v;; esac
    PYTHONPATH=$pp:$PWD/TREES/pylib timeout 200 python3 -c "import sys; from ark_runtime.cli.main import main; sys.exit(main())" bench loop --cases f --no-compile --json $OUT/f_${v}_$r.json --plot $OUT/f_${v}_$r.png > $OUT/f_${v}_$r.log 2>&1
    echo "$v $r rc=$?"
    python3 - $OUT/f_${v}_$r.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    print(" ", r.get("case"), r.get("path"), r.get("arkdma_us"), r.get("copy_us", r.get("transfer_us")), {k: v for k, v in r.items() if "copy" in k and not isinstance(v, (dict, list))})
PY
  done
done
