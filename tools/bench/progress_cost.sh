#!/usr/bin/env bash
# The cost of the worker's progress reports (DDPRUN_PROGRESS_FILE): the time of one report
# (build/bin/progress_file_bench, on the file system of TMPDIR), and samples/s of one epoch of the MLP on
# Fashion-MNIST with 1 rank, with and without the file, alternating, REPEATS times each. Prints Markdown.
# Usage: tools/bench/progress_cost.sh [--out FILE]
# Environment: REPEATS (default 5), WORKER (default build/bin/worker), DATA_DIR (default
# /usr/share/datasets/fashion-mnist).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/tools/bench/out_arg.sh" "$@"
repeats=${REPEATS:-5}
worker=${WORKER:-$root/build/bin/worker}
bench=$root/build/bin/progress_file_bench
data_dir=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
for f in "$worker" "$bench"; do [[ -x $f ]] || { echo "$0: $f not found; build it first" >&2; exit 1; }; done
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
micro=$("$bench" "$tmp/bench-progress")
for ((rep = 1; rep <= repeats; rep++)); do
  for mode in with without; do
    echo "[$rep/$repeats] $mode…" >&2
    env=()
    [[ $mode == with ]] && env=(DDPRUN_PROGRESS_FILE="$tmp/progress")
    env "${env[@]}" "$worker" --dataset fashion-mnist --data-dir "$data_dir" --log-every 100000 \
      --metrics-file "$tmp/$mode-$rep.jsonl" >/dev/null
    printf '%s\t%s\n' "$mode" "$(grep '"type":"epoch"' "$tmp/$mode-$rep.jsonl" | tail -n 1)" >>"$tmp/runs.tsv"
  done
done
section=$(/usr/bin/python3 - "$tmp/runs.tsv" "$micro" "$repeats" "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" "$(date -u +%Y-%m-%dT%H:%MZ)" <<'EOF'
import json, statistics, sys
path, micro, repeats, commit, when = sys.argv[1:]
m = json.loads(micro)
runs = {}
for line in open(path):
    mode, record = line.rstrip("\n").split("\t", 1)
    runs.setdefault(mode, []).append(json.loads(record))
print("### Progress reports: cost per step")
print()
print(f"Commit {commit}; {when}. One report (pwrite at offset 0 of an open file, ftruncate only when shorter): "
      f"{m['ns_per_report_min']:.0f} ns (min of 5 rounds of {m['reports']:,}), median {m['ns_per_report_median']:.0f} ns.")
print()
print("| DDPRUN_PROGRESS_FILE | samples/s, 1 rank, MLP (median of runs) | min–max | step time (median) |")
print("|---|---:|---:|---:|")
med = {}
for mode in ("without", "with"):
    s = [r["samples_per_s"] for r in runs[mode]]
    med[mode] = statistics.median(s)
    print(f"| {mode} | {med[mode]:,.0f} | {min(s):,.0f}–{max(s):,.0f} | {64e6 / med[mode]:.0f} µs |")
print()
print(f"- with / without: {med['with'] / med['without']:.3f}× ({repeats} runs each, alternating); one report is "
      f"{m['ns_per_report_min'] / (64e9 / med['without']) * 100:.3f}% of a step")
EOF
)
printf '%s\n' "$section"
[[ -z $out ]] || { printf '%s\n' "$section" >"$out"; echo "written to $out" >&2; }
