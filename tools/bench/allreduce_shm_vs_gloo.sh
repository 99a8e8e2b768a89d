#!/usr/bin/env bash
# One allreduce of the MLP's gradient bucket (203,530 float32 = 0.8 MB) between processes of one host, through
# the worker's own communicators: shm vs Gloo, side by side. Each run is RANKS processes under
# tools/launch-local.sh doing ITERATIONS timed allreduces (after a warm-up); runs alternate between the two
# backends REPEATS times. Prints a Markdown table of the per-call median and p99 (microseconds): the median
# over runs of each run's median and p99, with their ranges.
# Usage: tools/bench/allreduce_shm_vs_gloo.sh [--out FILE]
# Environment: REPEATS (default 5), RANKS (default 2), ELEMENTS (default 203530), ITERATIONS (default 2000),
# BENCH (default build/bin/allreduce_bench).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/tools/bench/out_arg.sh" "$@"
repeats=${REPEATS:-5} ranks=${RANKS:-2} elements=${ELEMENTS:-203530} iterations=${ITERATIONS:-2000}
bench=${BENCH:-$root/build/bin/allreduce_bench}
[[ -x $bench ]] || { echo "$0: $bench not found; build the target allreduce_bench first" >&2; exit 1; }
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((rep = 1; rep <= repeats; rep++)); do
  for backend in shm gloo; do
    echo "[$rep/$repeats] $backend…" >&2
    "$root/tools/launch-local.sh" "$ranks" "$bench" "$backend" "$elements" "$iterations" | grep '^{' >>"$tmp/runs.jsonl"
  done
done
section=$(/usr/bin/python3 - "$tmp/runs.jsonl" "$repeats" "$ranks" "$elements" "$iterations" "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" "$(date -u +%Y-%m-%dT%H:%MZ)" <<'EOF'
import json, statistics, sys
path, repeats, ranks, elements, iterations, commit, when = sys.argv[1:]
runs = {}
for line in open(path):
    r = json.loads(line)
    runs.setdefault(r["backend"], []).append(r)
print(f"### One allreduce of {int(elements):,} float32 ({int(elements) * 4 / 1e6:.2f} MB), {ranks} processes, shm vs Gloo")
print()
print(f"{repeats} runs per backend, alternating, each {iterations} timed calls after a warm-up; commit {commit}; {when}.")
print()
print("| backend | median µs (median of runs) | range | p99 µs (median of runs) | range |")
print("|---|---:|---:|---:|---:|")
med = {}
for backend in ("shm", "gloo"):
    v = runs.get(backend, [])
    if not v:
        continue
    m = [r["median_us"] for r in v]
    p = [r["p99_us"] for r in v]
    med[backend] = (statistics.median(m), statistics.median(p))
    print(f"| {backend} | {med[backend][0]:.0f} | {min(m):.0f}–{max(m):.0f} | {med[backend][1]:.0f} | {min(p):.0f}–{max(p):.0f} |")
if len(med) == 2:
    print()
    print(f"- Gloo / shm: {med['gloo'][0] / med['shm'][0]:.1f}× at the median, {med['gloo'][1] / med['shm'][1]:.1f}× at p99")
EOF
)
printf '%s\n' "$section"
[[ -z $out ]] || { printf '%s\n' "$section" >"$out"; echo "written to $out" >&2; }
