set -u
python3 -m pip install --no-deps --no-build-isolation -q -e . > /dev/null 2>&1
REPO=$PWD
for r in 1 2; do
  for t in v4g va vb vc; do
    d=$REPO/.snap/$t
    (cd $d && PYTHONPATH=$REPO timeout 200 python3 -m ark_runtime.cli.main bench loop --cases b --no-compile --json $OUT/b_${t}_$r.json --plot /tmp/p.png > /tmp/b_${t}_$r.log 2>&1)
    python3 - $OUT/b_${t}_$r.json $t $r <<'P'
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], sys.argv[3], " ".join(f"{x['case']} {x['arkdma_us']:.1f}" for x in d["rows"]), flush=True)
P
  done
done
