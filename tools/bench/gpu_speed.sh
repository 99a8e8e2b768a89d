#!/usr/bin/env bash
# The GPU speed table: the C++ worker with its step recorded as CUDA graphs (--cuda-graph on) and eager (off), next to
# stock Python DDP and a Python script that captures its whole step (tools/bench/python_ddp.py [--cuda-graph]), one
# rank with NCCL, each under ddprun --standalone. Interleaved: every round runs each implementation once, in an
# order that rotates from round to round; a run trains 2 epochs and only the second counts (the first warms up the
# CUDA context, cuBLAS and the captures). Prints a Markdown table of medians and min–max per model and precision.
#
# Usage: tools/bench/gpu_speed.sh [--cpu-dry-run] [--out FILE] [--help]
#   --cpu-dry-run  no GPU: Gloo on the CPU, the two eager implementations only (graphs need CUDA); proves the
#                  runs, the parsing and the table. Chosen by itself when nvidia-smi finds no GPU.
# Environment: BUILD_DIR (default build-gpu; build in the dry run), PYTHON (default python3; /usr/bin/python3 in the
# dry run), DATA_DIR and DATASET (default .gpu-deps/fashion-mnist when there, else data/mnist), ROUNDS (default 5:
# the first configuration's rounds), MORE_ROUNDS (default 1: every other configuration's), CONFIGS (default
# "mlp fp32,mlp bf16,cnn fp32"), LOGS (default a temp dir: every run's raw output), STEP_TIMEOUT_S (default 120).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mode=auto
out=
while (($# > 0)); do
  case $1 in
    --cpu-dry-run) mode=dry; shift ;;
    --out) out=${2:?--out needs a file}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_speed: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ $mode == auto ]]; then
  mode=dry
  command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && mode=gpu
fi
if [[ $mode == gpu ]]; then
  build=${BUILD_DIR:-$root/build-gpu}
  python=${PYTHON:-python3}
  impls=(cpp-graph cpp-eager py-ddp py-graph)
  device=cuda backend=nccl
else
  build=${BUILD_DIR:-$root/build}
  python=${PYTHON:-/usr/bin/python3}
  impls=(cpp-eager py-ddp)
  device=cpu backend=gloo
fi
python=$(command -v "$python" || echo "$python")
if [[ -n ${DATA_DIR:-} ]]; then
  data_dir=$DATA_DIR dataset=${DATASET:-mnist}
elif compgen -G "$root/.gpu-deps/fashion-mnist/train-images-idx3-ubyte*" >/dev/null; then
  data_dir=$root/.gpu-deps/fashion-mnist dataset=${DATASET:-fashion-mnist}
else
  data_dir=$root/data/mnist dataset=${DATASET:-mnist}
fi
rounds=${ROUNDS:-5}
more_rounds=${MORE_ROUNDS:-1}
timeout_s=${STEP_TIMEOUT_S:-120}
IFS=, read -r -a configs <<<"${CONFIGS:-mlp fp32,mlp bf16,cnn fp32}"
for bin in ddprun worker; do
  [[ -x $build/bin/$bin ]] || { echo "gpu_speed: no $build/bin/$bin (set BUILD_DIR)" >&2; exit 2; }
done
logs=${LOGS:-$(mktemp -d)}
mkdir -p "$logs"
results=$logs/results.tsv
: >"$results"

# run IMPL MODEL PRECISION ROUND: one run; appends "model precision impl round json-of-epoch-2" (or "failed").
run() {
  local impl=$1 model=$2 precision=$3 round=$4
  local tag=$impl-$model-$precision-$round json=
  local args=(--dataset "$dataset" --data-dir "$data_dir" --model "$model" --epochs 2 --batch-size 64 --lr 0.05
    --momentum 0.9 --seed 0 --backend "$backend" --device "$device")
  [[ $precision == bf16 ]] && args+=(--amp)
  local launch=(timeout --kill-after=10 "$timeout_s" env OMP_NUM_THREADS=1 DDPRUN_PYTHON="$python"
    "$build/bin/ddprun" --nproc-per-node 1 --standalone)
  case $impl in
    cpp-*)
      local graph=off
      [[ $impl == cpp-graph ]] && graph=on
      "${launch[@]}" "$build/bin/worker" "${args[@]}" --cuda-graph "$graph" --log-every 100000 \
        --metrics-file "$logs/$tag.jsonl" >"$logs/$tag.log" 2>&1 || true
      json=$(grep '"type":"epoch"' "$logs/$tag.jsonl" 2>/dev/null | sed -n 2p || true)
      ;;
    py-*)
      [[ $impl == py-graph ]] && args+=(--cuda-graph)
      "${launch[@]}" "$root/tools/bench/python_ddp.py" "${args[@]}" >"$logs/$tag.log" 2>&1 || true
      json=$(grep -o '{"type": "epoch".*"epoch": 2,.*}' "$logs/$tag.log" | tail -n 1 || true)
      ;;
  esac
  printf '%s\t%s\t%s\t%s\t%s\n' "$model" "$precision" "$impl" "$round" "${json:-failed}" >>"$results"
  echo "[gpu_speed] $tag: $([[ -n $json ]] && echo ok || echo "failed (log: $logs/$tag.log)")" >&2
}

first=1
for config in "${configs[@]}"; do
  read -r model precision <<<"$config"
  n=$more_rounds
  ((first)) && n=$rounds
  first=0
  for ((r = 0; r < n; r++)); do
    for ((i = 0; i < ${#impls[@]}; i++)); do
      run "${impls[(i + r) % ${#impls[@]}]}" "$model" "$precision" "$r"
    done
  done
done

table=$("$python" - "$results" "$mode" "$dataset" "$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)" \
  "$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo unknown)" \
  "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || echo none)" <<'EOF'
import json, statistics, sys
results, mode, dataset, commit, torch_version, gpu = sys.argv[1:]
names = {"cpp-graph": "C++, CUDA graphs", "cpp-eager": "C++, eager", "py-ddp": "Python DDP",
         "py-graph": "Python, captured step"}
runs, order = {}, []
for line in open(results):
    model, precision, impl, _, payload = line.rstrip("\n").split("\t", 4)
    key = (model, precision)
    if key not in order:
        order.append(key)
    runs.setdefault(key, {}).setdefault(impl, []).append(None if payload == "failed" else json.loads(payload))
title = "GPU speed" if mode == "gpu" else "GPU speed, CPU dry run (Gloo on the CPU; NOT GPU numbers)"
print(f"### {title}: one epoch of {dataset}, batch 64, 1 rank")
print()
print(f"{gpu}; torch {torch_version}; commit {commit}. Second epoch of each run (the first warms up); "
      "median (min–max) over the rounds; samples/s = samples / epoch train time (device synchronised); host ms/step: "
      "the host's time in a step (on CUDA, issuing it: near the epoch's time per step, the host bounds the step).")
print()
print("| model | precision | implementation | runs | epoch s | samples/s | host ms/step | test acc. | × Python DDP |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|")
for key in order:
    ok = {impl: [r for r in rs if r] for impl, rs in runs[key].items()}
    base = statistics.median(r["samples_per_s"] for r in ok["py-ddp"]) if ok.get("py-ddp") else None
    for impl, rs in runs[key].items():
        good = ok[impl]
        if not good:
            print(f"| {key[0]} | {key[1]} | {names[impl]} | 0 of {len(rs)} | failed | | | | |")
            continue
        t = [r["train_time_s"] for r in good]
        s = [r["samples_per_s"] for r in good]
        acc = sorted({f"{r['test_accuracy'] * 100:.2f}%" for r in good})
        ratio = f"{statistics.median(s) / base:.2f}×" if base else "–"
        host = statistics.median(r.get("host_ms_per_step", float("nan")) for r in good)
        print(f"| {key[0]} | {key[1]} | {names[impl]} | {len(good)} of {len(rs)} | {statistics.median(t):.3f} "
              f"({min(t):.3f}–{max(t):.3f}) | {statistics.median(s):,.0f} ({min(s):,.0f}–{max(s):,.0f}) | "
              f"{host:.3f} | {', '.join(acc)} | {ratio} |")
EOF
)
echo "$table"
[[ -z $out ]] || echo "$table" >"$out"
echo "[gpu_speed] raw logs: $logs" >&2
! grep -q $'\tfailed$' "$results"
