set -u
python3 -m pip install --no-deps --no-build-isolation -q -e . > /dev/null 2>&1
REPO=$PWD
for r in 1 2; do
  for t in new x64; do
    if [ $t = x64 ]; then d=$REPO/.snap/x64; else d=$REPO; fi
    (cd $d && PYTHONPATH=$REPO timeout 200 python3 -m ark_runtime.cli.main bench loop --cases b --no-compile --json $OUT/b_${t}_$r.json --plot /tmp/p.png > $OUT/b_${t}_$r.log 2>&1)
    python3 - $OUT/b_${t}_$r.json $t $r <<'P'
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], sys.argv[3], " ".join(f"{x['case']} {x['arkdma_us']:.2f} ok={x['ok']} err={x['max_rel_err']:.2g}" for x in d["rows"]), flush=True)
P
  done
done
