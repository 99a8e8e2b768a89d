#!/usr/bin/env bash
# Benchmarks the C++ worker (build/bin/worker) against the Python anchor (tools/bench/python_ddp.py,
# standard torch DDP over Gloo) on the same work: one epoch of Fashion-MNIST (60k train, 10k test), per-rank
# batch 64, SGD lr 0.05 momentum 0.9, seed 0, OMP_NUM_THREADS=1, CPU, for each model in MODELS.
# Per model and repeat, in this order (so machine noise hits every row alike): C++ with 2 ranks over shm
# (--backend shm), Python with 2 ranks, C++ with 2 ranks over Gloo, C++ with 1 rank, Python with 1 rank,
# two independent 1-rank C++ runs at once (no communication at all: what the machine gives two processes,
# the ceiling of any 2-rank run), and (FOUR_RANKS=1, oversubscribed on a 2-core machine) C++ shm and Python
# with 4 ranks. Prints a Markdown
# section: machine facts (with the OpenBLAS core type, which decides the speed of every matmul), a table
# per model of median samples/s (with min–max), test accuracy and epoch train time, and the ratios the
# goals name: C++ shm 2 ranks / Python 2 ranks, and / C++ 1 rank.
#
# Usage: tools/bench/worker_vs_python.sh [--out FILE]
#   --out FILE   also write the Markdown section to FILE (default: print only)
# Environment: REPEATS (default 3), MODELS (default "mlp cnn"), FOUR_RANKS (default 1), WORKER (default
# build/bin/worker), PYTHON (default /usr/bin/python3, which must have torch), DATA_DIR (default
# /usr/share/datasets/fashion-mnist). Other variables (OPENBLAS_CORETYPE, say) reach both sides alike.
# The worker must already be built; about 4 minutes per repeat with both models on 2 cores.
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
models=${MODELS:-mlp cnn}
for m in $models; do [[ $m == mlp || $m == cnn ]] || { echo "$0: MODELS: unknown model '$m'" >&2; exit 2; }; done
four=${FOUR_RANKS:-1}
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

# One run; appends "model impl ranks samples_per_s test_accuracy train_time_s" to $results.
# IMPL: cpp-shm, cpp-gloo, cpp (1 rank, no group), cpp-pair (two 1-rank runs at once; the sum) or python.
run_one() {
  local model=$1 impl=$2 ranks=$3 rep=$4 log=$tmp/$1-$2-$3-$4.log json
  echo "[$rep/$repeats] $model, $impl, $ranks rank(s)…" >&2
  if [[ $impl == cpp-pair ]]; then
    local a=$tmp/$model-pair-a-$rep.jsonl b=$tmp/$model-pair-b-$rep.jsonl pid
    "$worker" "${common[@]}" --model "$model" --log-every 100000 --metrics-file "$a" >"$log.a" 2>&1 &
    pid=$!
    "$worker" "${common[@]}" --model "$model" --log-every 100000 --metrics-file "$b" >"$log" 2>&1 || exit 1
    wait "$pid" || { echo "$0: C++ worker failed (pair)" >&2; tail -n 20 "$log.a" >&2; exit 1; }
    json=$("$python" -c 'import json, sys
r = [json.loads([l for l in open(p) if "\"epoch\"" in l][-1]) for p in sys.argv[1:]]
print(json.dumps({"samples_per_s": r[0]["samples_per_s"] + r[1]["samples_per_s"], "test_accuracy": r[0]["test_accuracy"],
                  "train_time_s": max(x["train_time_s"] for x in r)}))' "$a" "$b")
  elif [[ $impl == cpp* ]]; then
    local metrics=$tmp/$model-$impl-$ranks-$rep.jsonl backend=()
    [[ $impl == cpp-* ]] && backend=(--backend "${impl#cpp-}")
    if ! timeout 600 "$launch" "$ranks" "$worker" "${common[@]}" --model "$model" "${backend[@]}" \
      --log-every 100000 --metrics-file "$metrics" >"$log" 2>&1; then
      echo "$0: C++ worker failed ($model, $impl, $ranks ranks); last lines:" >&2; tail -n 20 "$log" >&2; exit 1
    fi
    json=$(grep '"type":"epoch"' "$metrics" | tail -n 1)
  else
    if ! timeout 900 "$launch" "$ranks" "$python" "$anchor" "${common[@]}" --model "$model" >"$log" 2>&1; then
      echo "$0: Python DDP failed ($model, $ranks ranks); last lines:" >&2; tail -n 20 "$log" >&2; exit 1
    fi
    json=$(grep '"type": "epoch"' "$log" | tail -n 1)
  fi
  [[ -n $json ]] || { echo "$0: no epoch metrics from $impl ($ranks ranks)" >&2; tail -n 20 "$log" >&2; exit 1; }
  "$python" -c 'import json, sys
r = json.loads(sys.argv[1])
print(*sys.argv[2:5], r["samples_per_s"], r["test_accuracy"], r["train_time_s"], sep="\t")' \
    "$json" "$model" "$impl" "$ranks" >>"$results"
}

for ((rep = 1; rep <= repeats; rep++)); do
  for model in $models; do
    run_one "$model" cpp-shm 2 "$rep"
    run_one "$model" python 2 "$rep"
    run_one "$model" cpp-gloo 2 "$rep"
    run_one "$model" cpp 1 "$rep"
    run_one "$model" python 1 "$rep"
    run_one "$model" cpp-pair 2 "$rep"
    if [[ $four == 1 ]]; then
      run_one "$model" cpp-shm 4 "$rep"
      run_one "$model" python 4 "$rep"
    fi
  done
done

cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/^[^:]*: *//' || true)
blas=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | sed -n 's/^Value: *//p' || true)
blas_core=$(OPENBLAS_VERBOSE=2 "$worker" --help 2>&1 >/dev/null | sed -n 's/^Core: *//p' | head -n 1 || true)
torch_version=$("$python" -c 'import torch; print(torch.__version__)')
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)

section=$("$python" - "$results" "$repeats" "$cpus" "${cpu_model:-unknown}" "$torch_version" \
  "${blas:-unknown}" "${blas_core:-unknown}${OPENBLAS_CORETYPE:+ (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)}" "$commit" \
  "$(date -u +%Y-%m-%dT%H:%MZ)" <<'EOF'
import statistics, sys
path, repeats, nproc, cpu, torch_version, blas, core, commit, when = sys.argv[1:]
runs = {}
for line in open(path):
    model, impl, ranks, sps, acc, secs = line.rstrip("\n").split("\t")
    runs.setdefault((model, impl, int(ranks)), []).append((float(sps), float(acc), float(secs)))
names = {"cpp-shm": "C++ worker, shm", "cpp-gloo": "C++ worker, Gloo", "cpp": "C++ worker (no group)",
         "python": "Python DDP (Gloo)", "cpp-pair": "two 1-rank C++ runs at once (sum; no communication)"}
med = {k: statistics.median(r[0] for r in v) for k, v in runs.items()}
def accs(v):
    a = sorted({f"{r[1] * 100:.2f}%" for r in v})
    return a[0] if len(a) == 1 else " / ".join(a)
print("### C++ worker (shm and Gloo) vs Python DDP, Fashion-MNIST, CPU")
print()
print(f"One epoch of Fashion-MNIST (60k train, 10k test), batch 64 per rank, SGD lr 0.05 momentum 0.9, seed 0, "
      f"OMP_NUM_THREADS=1; median of {repeats} run{'s' if int(repeats) > 1 else ''} each, configurations interleaved. "
      "samples/s = global samples / epoch train time (data loading and evaluation excluded). 4 ranks on "
      f"{nproc} CPUs are oversubscribed (reported, no goal).")
print()
print(f"Machine: {nproc} CPUs (nproc; {cpu}); torch {torch_version}; BLAS {blas}, OpenBLAS core {core}; "
      f"commit {commit}; {when}.")
for model in dict.fromkeys(k[0] for k in runs):
    print()
    print(f"Model {model}:")
    print()
    print("| implementation | ranks | samples/s (median) | min–max | test accuracy | epoch train time (median) |")
    print("|---|---:|---:|---:|---:|---:|")
    for (m, impl, ranks), v in runs.items():
        if m != model:
            continue
        s = [r[0] for r in v]
        t = statistics.median(r[2] for r in v)
        print(f"| {names[impl]} | {ranks} | {med[(m, impl, ranks)]:,.0f} | {min(s):,.0f}–{max(s):,.0f} | "
              f"{accs(v)} | {t:.2f} s |")
    print()
    def ratio(a, b, label, goal=""):
        if a in med and b in med:
            print(f"- {label}: {med[a] / med[b]:.2f}×{goal}")
    ratio((model, "cpp-shm", 2), (model, "python", 2), "C++ shm / Python DDP at 2 ranks", " (goal ≥ 2.5×)")
    ratio((model, "cpp-shm", 2), (model, "cpp", 1), "C++ shm at 2 ranks / C++ at 1 rank", " (goal ≥ 1.6×)")
    ratio((model, "cpp-pair", 2), (model, "cpp", 1), "the machine's ceiling for 2 ranks: two independent 1-rank runs / one")
    ratio((model, "cpp-shm", 2), (model, "cpp-pair", 2), "C++ shm at 2 ranks / that ceiling")
    ratio((model, "cpp-shm", 2), (model, "cpp-gloo", 2), "C++ shm / C++ Gloo at 2 ranks")
    ratio((model, "python", 2), (model, "python", 1), "Python DDP 2 ranks / 1 rank")
    ratio((model, "cpp-shm", 4), (model, "python", 4), "C++ shm / Python DDP at 4 ranks")
EOF
)

printf '%s\n' "$section"
if [[ -n $out ]]; then
  printf '%s\n' "$section" >"$out"
  echo "written to $out" >&2
fi
