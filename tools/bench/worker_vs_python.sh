#!/usr/bin/env bash
# Benchmarks the C++ worker (build/bin/worker) against the Python anchor (tools/bench/python_ddp.py,
# standard torch DDP over Gloo) on the same work: one epoch of Fashion-MNIST (60k train, 10k test),
# MLP 784-256-10, per-rank batch 64, SGD lr 0.05 momentum 0.9, seed 0, OMP_NUM_THREADS=1, CPU.
# Runs, in one go, C++ with 2 ranks, Python with 2 ranks, C++ with 1 rank and Python with 1 rank, each
# REPEATS times (alternating C++ and Python so machine noise hits both), and prints a Markdown section:
# machine facts, a table of median samples/s (with min–max), test accuracy and epoch train time, the
# C++/Python ratios and the 1→2 rank scaling of each.
#
# Usage: tools/bench/worker_vs_python.sh [--out FILE]
#   --out FILE   also write the Markdown section to FILE (default: print only)
# Environment: REPEATS (default 3), WORKER (default build/bin/worker), PYTHON (default /usr/bin/python3,
# which must have torch), DATA_DIR (default /usr/share/datasets/fashion-mnist).
# The worker must already be built; takes a few minutes with REPEATS=3 on 2 cores.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=""
while (($# > 0)); do
  case $1 in
    --out) (($# >= 2)) || { echo "$0: --out needs a file" >&2; exit 2; }; out=$2; shift 2 ;;
    --out=*) out=${1#--out=}; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "$0: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

repeats=${REPEATS:-3}
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "$0: REPEATS must be a positive integer" >&2; exit 2; }
worker=${WORKER:-$root/build/bin/worker}
python=${PYTHON:-/usr/bin/python3}
data_dir=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
launch=$root/tools/launch-local.sh
anchor=$root/tools/bench/python_ddp.py
[[ -x $worker ]] || { echo "$0: $worker not found; build the worker first" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null || { echo "$0: $python cannot import torch" >&2; exit 1; }

# GNU nproc honours OMP_NUM_THREADS, so count the CPUs before setting it.
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
export OMP_NUM_THREADS=1
common=(--dataset fashion-mnist --data-dir "$data_dir" --batch-size 64 --epochs 1 --lr 0.05 --momentum 0.9
  --seed 0)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
results=$tmp/results.tsv
: >"$results"

# One run; appends "impl ranks samples_per_s test_accuracy train_time_s" to $results.
run_one() {
  local impl=$1 ranks=$2 rep=$3 log=$tmp/$1-$2-$3.log json
  echo "[$rep/$repeats] $impl, $ranks rank(s)…" >&2
  if [[ $impl == cpp ]]; then
    local metrics=$tmp/$impl-$ranks-$rep.jsonl
    if ! timeout 300 "$launch" "$ranks" "$worker" "${common[@]}" --model mlp --log-every 100000 \
      --metrics-file "$metrics" >"$log" 2>&1; then
      echo "$0: C++ worker failed ($ranks ranks); last lines:" >&2; tail -n 20 "$log" >&2; exit 1
    fi
    json=$(grep '"type":"epoch"' "$metrics" | tail -n 1)
  else
    if ! timeout 300 "$launch" "$ranks" "$python" "$anchor" "${common[@]}" >"$log" 2>&1; then
      echo "$0: Python DDP failed ($ranks ranks); last lines:" >&2; tail -n 20 "$log" >&2; exit 1
    fi
    json=$(grep '"type": "epoch"' "$log" | tail -n 1)
  fi
  [[ -n $json ]] || { echo "$0: no epoch metrics from $impl ($ranks ranks)" >&2; tail -n 20 "$log" >&2; exit 1; }
  "$python" -c 'import json, sys
r = json.loads(sys.argv[1])
print(sys.argv[2], sys.argv[3], r["samples_per_s"], r["test_accuracy"], r["train_time_s"], sep="\t")' \
    "$json" "$impl" "$ranks" >>"$results"
}

for ((rep = 1; rep <= repeats; rep++)); do
  for ranks in 2 1; do
    run_one cpp "$ranks" "$rep"
    run_one python "$ranks" "$rep"
  done
done

cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/^[^:]*: *//' || true)
blas=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | sed -n 's/^Value: *//p' || true)
torch_version=$("$python" -c 'import torch; print(torch.__version__)')
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)

section=$("$python" - "$results" "$repeats" "$cpus" "${cpu_model:-unknown}" "$torch_version" \
  "${blas:-unknown}" "$commit" "$(date -u +%Y-%m-%dT%H:%MZ)" <<'EOF'
import statistics, sys
path, repeats, nproc, cpu, torch_version, blas, commit, when = sys.argv[1:]
runs = {}
for line in open(path):
    impl, ranks, sps, acc, secs = line.split("\t")
    runs.setdefault((impl, int(ranks)), []).append((float(sps), float(acc), float(secs)))
names = {"cpp": "C++ worker (LibTorch)", "python": "Python DDP (torch)"}
med = {k: statistics.median(r[0] for r in v) for k, v in runs.items()}
def accs(v):
    a = sorted({f"{r[1] * 100:.2f}%" for r in v})
    return a[0] if len(a) == 1 else " / ".join(a)
print("### C++ worker vs Python DDP (Fashion-MNIST, MLP, CPU, Gloo)")
print()
print(f"One epoch of Fashion-MNIST (60k train, 10k test), MLP 784-256-10, batch 64 per rank, SGD lr 0.05 "
      f"momentum 0.9, seed 0, OMP_NUM_THREADS=1; median of {repeats} run{'s' if int(repeats) > 1 else ''} each, C++ and Python alternating. "
      "samples/s = global samples / epoch train time (data loading and evaluation excluded).")
print()
print(f"Machine: {nproc} CPUs (nproc; {cpu}); torch {torch_version}; BLAS {blas}; commit {commit}; {when}.")
print()
print("| implementation | ranks | samples/s (median) | min–max | test accuracy | epoch train time (median) |")
print("|---|---:|---:|---:|---:|---:|")
for ranks in (2, 1):
    for impl in ("cpp", "python"):
        v = runs[(impl, ranks)]
        s = [r[0] for r in v]
        t = statistics.median(r[2] for r in v)
        print(f"| {names[impl]} | {ranks} | {med[(impl, ranks)]:,.0f} | {min(s):,.0f}–{max(s):,.0f} | "
              f"{accs(v)} | {t:.2f} s |")
print()
for ranks in (2, 1):
    print(f"- C++/Python at {ranks} rank{'s' if ranks > 1 else ''}: "
          f"{med[('cpp', ranks)] / med[('python', ranks)]:.2f}×")
for impl in ("cpp", "python"):
    print(f"- 1→2 rank scaling, {names[impl]}: {med[(impl, 2)] / med[(impl, 1)]:.2f}×")
EOF
)

printf '%s\n' "$section"
if [[ -n $out ]]; then
  printf '%s\n' "$section" >"$out"
  echo "written to $out" >&2
fi
