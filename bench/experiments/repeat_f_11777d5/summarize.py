"""Medians and ranges of the copy rows over the runs of bench/results/h100/repeat_f_11777d5/ (run there:
python3 ../../../experiments/repeat_f_11777d5/summarize.py)."""
import glob
import json
import statistics

CEILING_GBPS = 55.0  # the copy ceiling for GPU -> pinned host
rows = {}
for f in sorted(glob.glob("*_run*.json")):
    for r in json.load(open(f))["rows"]:
        rows.setdefault((r["model"], r["path"]), []).append(r["copy_us"])
for (model, path), us in rows.items():
    nbytes = int(model.removeprefix("copy"))
    med = statistics.median(us)
    frac = nbytes / (CEILING_GBPS * 1e3) / med
    print(f"{model:12} {path:22} runs {len(us):2}  copy us median {med:6.2f}  range {min(us):6.2f}-{max(us):6.2f}"
          + (f"  median = {100 * frac:.1f}% of {CEILING_GBPS:g} GB/s" if nbytes >= 1 << 20 else ""))
