#!/usr/bin/env bash
# Runs the same `lightwave bench` cases with two builds, alternately, to show whether a change
# moved the figures beyond the run-to-run noise (each case is run ROUNDS times per build).
#     scripts/bench_against.sh BASE_LIGHTWAVE NEW_LIGHTWAVE [ROUNDS]   (default 2)
# Cases: the Llama-3-8B shape with random bf16 weights: batch 1 (512 in / 256 out) and 64
# requests of 512 in / 256 out (`bench --shape llama3-8b`), and batch 1 at 8192 in / 64 out.
# Prints one line per run (build, round, case, the bench's figures) and a table of the means;
# the runs' output and JSON go to build/bench-against (the device tool returns at most 8 files
# from $OUT: only the table, bench_against.md, goes there).
set -euo pipefail
base=${1:?base lightwave binary}
new=${2:?new lightwave binary}
rounds=${3:-2}
out=build/bench-against
rm -rf "$out"
mkdir -p "$out"
cases=("default::" "long::--requests 1 --input-len 8192 --output-len 64 --no-throughput")
for ((r = 1; r <= rounds; ++r)); do
  for which in base new; do
    bin=$base
    [[ $which == new ]] && bin=$new
    for c in "${cases[@]}"; do
      name=${c%%::*}
      args=${c#*::}
      # shellcheck disable=SC2086
      "$bin" bench --shape llama3-8b $args --json "$out/$which-$name-$r.json" > "$out/$which-$name-$r.txt" 2>&1
      echo "== $which round $r $name"
      grep -E "tok/s|TTFT|TPOT" "$out/$which-$name-$r.txt" || true
    done
  done
done
python3 - "$out" "$rounds" <<'PY' | tee "${OUT:-$out}/bench_against.md"
import json, sys, glob, statistics, os
out, rounds = sys.argv[1], int(sys.argv[2])
def flat(d, prefix=""):
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            yield from flat(v, key + ".")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield key, float(v)
rows = {}
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    which, name, _ = os.path.basename(path)[:-5].split("-")
    for key, v in flat(json.load(open(path))):
        rows.setdefault((name, key), {}).setdefault(which, []).append(v)
print(f"| case | figure | base (mean of {rounds}) | new (mean of {rounds}) | new / base |")
print("| --- | --- | --- | --- | --- |")
for (name, key), v in sorted(rows.items()):
    if "base" not in v or "new" not in v or len(set(v["base"] + v["new"])) == 1:
        continue  # the case's settings (lengths, request count), the same in every run
    b, n = statistics.mean(v["base"]), statistics.mean(v["new"])
    ratio = f"{n / b:.3f}" if b else "-"
    print(f"| {name} | {key} | {b:.4g} | {n:.4g} | {ratio} |")
PY
