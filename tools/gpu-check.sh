#!/usr/bin/env bash
# The GPU check in one script, for a GPU machine that reaches no package registry:
#   1. facts: GPU, driver, the machine's torch (version, CUDA, NCCL, C++ ABI), compilers;
#   2. deps: unpacks the Debian packages that tools/gpu-deps.sh downloaded (.gpu-deps/debs);
#   3. configure + build against the machine's CUDA LibTorch (torch.utils.cmake_prefix_path) with
#      -DDDPRUN_WITH_CUDA=ON: ddprun, ddprun-store and the worker (its NEEDED libraries and where its
#      std::filesystem calls bind are logged: CMakeLists.txt's ddprun_link_stdcxx_first says why);
#   4. the speed table (tools/bench/gpu_speed.sh: the worker with and without CUDA graphs, Python DDP eager and
#      captured, interleaved rounds, medians), then one epoch of MNIST-format training, MLP and CNN, under ddprun: NCCL with world size 1 (float32 and
#      --amp bf16) and 2 ranks sharing the GPU through Gloo; each next to tools/bench/python_ddp.py (stock
#      torch DDP, same data, model, init, sampler and hyper-parameters) with the machine's torch, also
#      under ddprun (so torch's env:// rendezvous runs against ddprun's agent store);
#   5. the store's conformance tests (tests/scripts/tcpstore_client_conformance.py) with torch's stock
#      TCPStore client against build/bin/ddprun-store;
#   6. a stock torch DDP script (tests/scripts/stock_ddp.py) under ddprun with the agent store;
#   7. (GPU only) NCCL's flight recorder on a hang: an NCCL job whose allreduce never completes
#      (tests/scripts/nccl_hang.py) is found hung by ddprun, which asks for the flight recorder dump before it
#      stops the job; the dump must be in the attempt's directory and torch's fr_trace must read it; and the
#      store key alone (tests/scripts/nccl_dump_key.py: no pipe) must make a rank dump;
#   8. a real two-rank NCCL hang on the one GPU (two ddprun nodes with different NCCL_HOSTID; rank 1 skips an
#      allreduce): the verdict, and the dump of the rank whose own agent never asked arriving through the store key
#      (the dry run: the two agents and the verdict, over Gloo);
#   9. the unit-test binaries and the unit tests (the Python-parity ones against the machine's torch);
# and prints one Markdown section: a table of epoch time, samples/s and test accuracy, C++ next to
# Python, and every step's result. A failed step is reported (with its log's tail) and the rest still run.
#
# Usage: tools/gpu-check.sh [--cpu-dry-run | --gpu] [--skip-build]
#   --cpu-dry-run  no GPU: a CPU build against the LibTorch CMake finds (Debian's), Gloo on the CPU, and
#                  /usr/bin/python3 as the Python; proves the pipeline, the table and the Python and store
#                  steps. Chosen by itself when no GPU is found (nvidia-smi -L).
#   --gpu          insist on the GPU path even if no GPU is detected.
#   --skip-build   reuse the build dir as it is (a rerun on a machine that kept it).
# Environment: OUT (results: gpu-check.md, results.tsv, gpu-check-logs.tar.gz; default
# <repo>/build-gpu-check), BUILD_DIR (default <repo>/build-gpu, or build-gpu-dry), PYTHON (default python3,
# or /usr/bin/python3 in the dry run), DATA_DIR and DATASET (default .gpu-deps/fashion-mnist when
# tools/gpu-deps.sh put it there, else data/mnist, the carried test split), JOBS (default nproc),
# STEP_TIMEOUT_S (per training run, default 240), UNIT_TESTS (0: skip building and running the unit tests, for a
# rerun that has already passed them), SPEED (0: skip the speed table, tools/bench/gpu_speed.sh, written to
# gpu-speed.md; its ROUNDS and MORE_ROUNDS pass through), EPOCH_TABLE (0: skip step 4's one-epoch table, keep the
# speed table), TWO_RANK_HANG (0: skip step 8), TRAINING (0: skip the worker's build and the training table, for a rerun of
# the launcher, store and flight-recorder steps alone), BUDGET_S (the whole check's time limit in seconds: each step's limit is cut to what
# is left, a step that would start with under 20 s left is recorded as skipped, and the report is still
# written, and the script exits 1 as for a failed step; for a lease whose command is killed at a fixed time).
# Order: the programs, the training table, the store and stock-script steps and the flight recorder first;
# the test binaries and unit tests last, so that a short lease gets the results only a GPU can give.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=auto
skip_build=0
while (($# > 0)); do
  case $1 in
    --cpu-dry-run) mode=dry; shift ;;
    --gpu) mode=gpu; shift ;;
    --skip-build) skip_build=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

gpu_lines() {
  local n=0
  if command -v nvidia-smi >/dev/null; then n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true); fi
  echo "${n:-0}"
}
if [[ $mode == auto ]]; then
  if (($(gpu_lines) > 0)); then mode=gpu; else mode=dry; fi
  [[ $mode == dry ]] && echo "gpu-check: no GPU found (nvidia-smi -L): CPU dry run" >&2
fi

out=${OUT:-$root/build-gpu-check}
if [[ $mode == gpu ]]; then
  build=${BUILD_DIR:-$root/build-gpu}
  python=${PYTHON:-python3}
  device=cuda
else
  build=${BUILD_DIR:-$root/build-gpu-dry}
  python=${PYTHON:-/usr/bin/python3}
  device=cpu
fi
# ddprun runs .py workers with $DDPRUN_PYTHON; an absolute path keeps every step on the same Python.
python=$(command -v "$python" || echo "$python")
jobs=${JOBS:-$(nproc)}
step_timeout=${STEP_TIMEOUT_S:-240}
# The report needs a few seconds after the last step: they are kept out of the steps' budget.
# 30 s are kept for it (a step may run 10 s past its limit before timeout kills it).
deadline=
if [[ -n ${BUDGET_S:-} ]]; then
  [[ $BUDGET_S =~ ^[0-9]+$ ]] || { echo "gpu-check: BUDGET_S must be a number of seconds, not '$BUDGET_S'" >&2; exit 2; }
  deadline=$(($(date +%s) + BUDGET_S - 30))
fi
if [[ -n ${DATA_DIR:-} ]]; then
  data_dir=$DATA_DIR
  dataset=${DATASET:-mnist}
elif compgen -G "$root/.gpu-deps/fashion-mnist/train-images-idx3-ubyte*" >/dev/null; then
  data_dir=$root/.gpu-deps/fashion-mnist
  dataset=${DATASET:-fashion-mnist}
else
  data_dir=$root/data/mnist
  dataset=${DATASET:-mnist}
fi

mkdir -p "$out"
logs=$(mktemp -d)
results=$out/results.tsv
steps=$logs/steps.tsv
: >"$results"
: >"$steps"
cleanup() {
  tar -czf "$out/gpu-check-logs.tar.gz" -C "$logs" . 2>/dev/null || true
  rm -rf "$logs"
}
trap cleanup EXIT

# step NAME LIMIT_S command…: runs the command with a time limit, its output in $logs/NAME.log; records
# "NAME<TAB>ok|failed (rc N)|timed out<TAB>seconds". Never fails itself, so every step runs.
step() {
  local name=$1 limit=$2 start rc result
  shift 2
  if [[ -n $deadline ]]; then
    local left=$((deadline - $(date +%s)))
    # Under 20 s left: skipped (a step gets at least 10 s, plus the 10 s timeout may wait before it kills).
    if ((left < 20)); then
      printf '%s\t%s\t%s\n' "$name" "skipped (BUDGET_S spent)" 0 >>"$steps"
      echo "[gpu-check] $name: skipped, BUDGET_S spent"
      return 0
    fi
    ((limit <= left - 10)) || limit=$((left - 10))
  fi
  start=$(date +%s.%N)
  echo "[gpu-check] $name…"
  # Through bash -c so that the step may be one of the functions below (exported); timeout signals the
  # whole process group, so a step's own background processes (the store) end with it.
  if timeout --kill-after=10 "$limit" bash -c '"$@"' step "$@" >"$logs/$name.log" 2>&1; then rc=0; else rc=$?; fi
  local seconds
  seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  case $rc in
    0) result=ok ;;
    124 | 137) result="timed out after ${limit}s" ;;
    *) result="failed (exit $rc)" ;;
  esac
  printf '%s\t%s\t%s\n' "$name" "$result" "$seconds" >>"$steps"
  echo "[gpu-check] $name: $result (${seconds}s)"
  if ((rc != 0)); then tail -n 25 "$logs/$name.log" | sed 's/^/    /'; fi
  return 0
}
step_ok() { grep -q "^$1"$'\t'"ok"$'\t' "$steps"; }

facts() {
  echo "mode: $mode; python: $python; build: $build; data: $data_dir ($dataset)"
  uname -a
  nvidia-smi -L 2>/dev/null || echo "nvidia-smi: none"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
  "$python" - <<'EOF'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      "devices", torch.cuda.device_count())
print("cxx11 abi", torch.compiled_with_cxx11_abi())
try:
    print("nccl", ".".join(map(str, torch.cuda.nccl.version())))
except Exception as e:  # CPU torch
    print("nccl: none", type(e).__name__)
print("cmake prefix", torch.utils.cmake_prefix_path)
EOF
  cmake --version | head -n 1
  c++ --version | head -n 1
  command -v nvcc >/dev/null && nvcc --version | tail -n 1 || echo "nvcc: none"
  command -v ninja >/dev/null && echo "ninja $(ninja --version)" || echo "ninja: none"
}

unpack_deps() {
  if ! compgen -G "$root/.gpu-deps/debs/*.deb" >/dev/null; then
    echo "no .gpu-deps/debs: using the system's packages"
    return 0
  fi
  bash "$root/tools/gpu-deps.sh" unpack
}

# configure cuda|nocuda: CMake against the machine's torch (GPU mode) and the deps prefix. "nocuda" is the
# fallback when the CUDA configure fails: ddprun, the store and a CPU worker still build, so the Python,
# store and launcher steps still run and the table says which C++ rows could not.
configure() {
  local with=$1 prefixes=() generator=()
  if compgen -G "$root/.gpu-deps/root/usr/include" >/dev/null; then prefixes+=("$root/.gpu-deps/root/usr"); fi
  local cmake_args=(-DCMAKE_BUILD_TYPE=Release -DDDPRUN_BUILD_TESTS=ON -DDDPRUN_WITH_CUDA=OFF)
  if [[ $mode == gpu ]]; then
    local torch_prefix
    torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
    prefixes=("$torch_prefix" "${prefixes[@]}")
    # Only Hopper here; naming it skips TorchConfig's GPU-architecture probe (no CUDA code is compiled).
    cmake_args+=(-DTORCH_CUDA_ARCH_LIST=9.0)
    [[ -d /usr/local/cuda ]] && cmake_args+=(-DCUDAToolkit_ROOT=/usr/local/cuda)
  fi
  if [[ $with == cuda ]]; then
    cmake_args+=(-DDDPRUN_WITH_CUDA=ON)
    # nccl.h of the NCCL this torch runs with (pip nvidia-nccl-cu*), when there is one.
    local nccl_include
    nccl_include=$("$python" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "include"))' \
      2>/dev/null || true)
    if [[ -n $nccl_include && -f $nccl_include/nccl.h ]]; then cmake_args+=(-DDDPRUN_NCCL_INCLUDE_DIR="$nccl_include"); fi
  fi
  # Gloo's headers from tools/gpu-deps.sh when the wheel ships none (its include dir lacks gloo/config.h).
  if [[ $mode == gpu && -f $root/.gpu-deps/gloo/include/gloo/config.h ]] &&
    ! "$python" -c 'import os, sys, torch; sys.exit(not os.path.isfile(os.path.join(os.path.dirname(torch.__file__), "include", "gloo", "config.h")))'; then
    echo "Gloo headers: .gpu-deps/gloo (commit $(cat "$root/.gpu-deps/gloo/COMMIT" 2>/dev/null || echo unknown))"
    cmake_args+=(-DDDPRUN_GLOO_INCLUDE_DIR="$root/.gpu-deps/gloo/include")
  fi
  command -v ninja >/dev/null && generator=(-G Ninja)
  local joined
  joined=$(IFS=';'; echo "${prefixes[*]:-}")
  echo "CMAKE_PREFIX_PATH=$joined"
  # A build dir configured with another generator cannot be reused.
  if [[ -f $build/CMakeCache.txt ]] && ! grep -q "CMAKE_GENERATOR:INTERNAL=${generator[1]:-Unix Makefiles}" "$build/CMakeCache.txt"; then
    rm -rf "$build"
  fi
  cmake -S "$root" -B "$build" "${generator[@]}" "${cmake_args[@]}" -DCMAKE_PREFIX_PATH="$joined"
}

# The programs first and the test binaries apart, so that a test that does not compile against this
# LibTorch cannot keep the training steps from running.
build_launcher() { cmake --build "$build" -j "$jobs" --target ddprun ddprun-store; }
# In the log: the worker's NEEDED libraries, and which library each of its std::filesystem calls binds to (must be
# libstdc++, not libtorch: CMakeLists.txt's ddprun_link_stdcxx_first).
build_worker() {
  if ! cmake --build "$build" -j "$jobs" --target worker; then
    # Gloo's headers staged by tools/gpu-deps.sh are not the wheel's own: should they not compile, the worker is
    # built for NCCL alone (the NCCL rows still run), and the step still fails.
    grep -q '^DDPRUN_GLOO_INCLUDE_DIR:PATH=.*/.gpu-deps/gloo/include$' "$build/CMakeCache.txt" || return 1
    echo "the worker did not compile with the staged Gloo headers: building it without Gloo"
    cmake "$build" -DDDPRUN_WITH_GLOO=OFF >/dev/null &&
      cmake --build "$build" -j "$jobs" --target worker
    return 1
  fi
  readelf -d "$build/bin/worker" | grep NEEDED || true
  LD_BIND_NOW=1 LD_DEBUG=bindings "$build/bin/worker" --help 2>&1 >/dev/null | grep '_ZNSt10filesystem' | head -n 40 || true
}
build_tests() {
  cmake --build "$build" -j "$jobs" --target worker_unit_test launcher_unit_test common_test store_protocol_test
}

unit_tests() {
  local failed=0 t
  for t in common_test launcher_unit_test store_protocol_test worker_unit_test; do
    echo "=== $t"
    if [[ ! -x $build/tests/$t ]]; then echo "not built"; failed=1; continue; fi
    DDPRUN_PYTHON=$python "$build/tests/$t" --gtest_brief=1 || failed=1
  done
  return $failed
}

# train IMPL MODEL BACKEND RANKS PRECISION: one epoch under ddprun; appends a row to $results.
train() {
  local impl=$1 model=$2 backend=$3 ranks=$4 precision=$5
  local tag=$impl-$model-$backend$ranks-$precision json=""
  local args=(--dataset "$dataset" --data-dir "$data_dir" --model "$model" --epochs 1 --batch-size 64 --lr 0.05
    --momentum 0.9 --seed 0 --backend "$backend" --device "$device")
  [[ $precision == bf16 ]] && args+=(--amp)
  if [[ $impl == cpp && $backend == gloo ]] &&
    grep -q '^DDPRUN_GLOO_INCLUDE_DIR:PATH=.*NOTFOUND\|^DDPRUN_WITH_GLOO:BOOL=OFF' "$build/CMakeCache.txt"; then
    # A pip torch ships no Gloo headers, so its worker is built for NCCL alone (worker/CMakeLists.txt): a known
    # limit of the build, not a failure of the check.
    printf '%s\t%s\t%s\n' "$tag" "not run: worker built without Gloo (no Gloo headers in this torch)" 0 >>"$steps"
    echo "[gpu-check] $tag: not run, the worker was built without Gloo (no Gloo headers in this torch)"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$impl" "$model" "$backend" "$ranks" "$precision" nogloo >>"$results"
    return 0
  fi
  if [[ $impl == cpp ]]; then
    step "$tag" "$step_timeout" env OMP_NUM_THREADS=1 "$build/bin/ddprun" --nproc-per-node "$ranks" --standalone \
      "$build/bin/worker" "${args[@]}" --log-every 100000 --metrics-file "$logs/$tag.jsonl"
    [[ -f $logs/$tag.jsonl ]] && json=$(grep '"type":"epoch"' "$logs/$tag.jsonl" | tail -n 1 || true)
  else
    step "$tag" "$step_timeout" env OMP_NUM_THREADS=1 DDPRUN_PYTHON="$python" "$build/bin/ddprun" \
      --nproc-per-node "$ranks" --standalone "$root/tools/bench/python_ddp.py" "${args[@]}"
    json=$(grep -o '{"type": "epoch".*}' "$logs/$tag.log" 2>/dev/null | tail -n 1 || true)
  fi
  # A step that BUDGET_S skipped is its own cell in the table, not a failure.
  if tail -n 1 "$steps" | grep -q $'\tskipped'; then json=skipped; fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$impl" "$model" "$backend" "$ranks" "$precision" "${json:-null}" >>"$results"
}

# A TCP port on loopback that is free now.
free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

store_conformance() {
  local port
  port=$(free_port)
  "$build/bin/ddprun-store" --host 127.0.0.1 --port "$port" &
  store_pid=$!
  trap 'kill "$store_pid" 2>/dev/null' EXIT
  local i
  for i in $(seq 100); do
    "$python" -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' "$port" \
      2>/dev/null && break
    sleep 0.1
  done
  "$python" "$root/tests/scripts/tcpstore_client_conformance.py" "$port"
}

stock_ddp() {
  local output
  output=$(DDPRUN_PYTHON=$python "$build/bin/ddprun" --nproc-per-node 2 --standalone \
    "$root/tests/scripts/stock_ddp.py" 2>&1)
  echo "$output"
  grep -q "rank 0 of 2 OK" <<<"$output" && grep -q "rank 1 of 2 OK" <<<"$output"
}

# The job waits for its GPU, so ddprun counts it as working (its GPU may compute) until --hang-busy-timeout; then it
# asks for the dump through the rank's pipe and the store's exception_dump key, and stops the job.
# The job's log directory and the dumps stay in the logs archive.
flight_recorder() {
  local logs_dir=$logs/flight-recorder-job dumps=$logs/flight-recorder-dumps output pid
  mkdir -p "$logs_dir" "$dumps"
  # torch's INFO lines say how many dumps each rank wrote ("Flight Recorder trace successfully dumped"); the
  # sampler records every change of the dump file (size, modification time) until ddprun has stopped the job,
  # so a second dump that rewrote the file after ddprun named it would show.
  TORCH_CPP_LOG_LEVEL=INFO DDPRUN_PYTHON=$python "$build/bin/ddprun" --nproc-per-node 1 --standalone \
    --max-restarts 0 --hang-min-timeout 3 --hang-busy-timeout 8 --log-dir "$logs_dir" \
    "$root/tests/scripts/nccl_hang.py" >"$logs/flight-recorder-job.out" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    find "$logs_dir" -name 'nccl_trace_rank_*' -printf '%s %T@ %p\n' 2>/dev/null | sed "s/^/$(date +%s.%N) /"
    sleep 0.05
  done | awk '{ key = $2 " " $3 " " $4; if (key != last) print; last = key }' >"$logs/flight-recorder-samples.txt"
  wait "$pid" || true
  output=$(cat "$logs/flight-recorder-job.out")
  echo "$output"
  echo "--- the dump file's changes (time, size, mtime, path):"
  cat "$logs/flight-recorder-samples.txt"
  echo "--- dumps begun: $(grep -c 'preparing to dump debug info' <<<"$output" || true);" \
    "written: $(grep -c 'Flight Recorder trace successfully dumped' <<<"$output" || true);" \
    "ddprun: $(grep -m 1 "NCCL flight recorder dump in" <<<"$output" || echo "named no dump")"
  grep -q "NCCL flight recorder dump in" <<<"$output" || { echo "no dump named in the log"; return 1; }
  # ddprun sets the store key before it pokes the pipe, and torch's monitor reads the key first: it must have seen it.
  grep -q "Observed flight recorder dump signal from another rank via TCPStore" <<<"$output" ||
    { echo "torch never saw the store key ddprun set (exception_dump)"; return 1; }
  cp "$logs_dir"/*/attempt_0/*/nccl_trace_rank_* "$dumps"/ || { echo "no dump file in the attempt directory"; return 1; }
  ls -la "$dumps"
  "$python" -m torch.distributed.flight_recorder.fr_trace "$dumps" -p nccl_trace_rank_ -j --allow-incomplete-ranks
}

# Two ddprun "nodes" on loopback (c10d rendezvous), one rank each on the one GPU, their agents with different
# NCCL_HOSTID (tests/scripts/nccl_skip.py says why), and rank 1 skips an allreduce. An agent must judge the hang and
# ask for the flight recorder dumps; the rank whose own agent never asked must dump on the store key alone (torch's
# "via TCPStore" line), and fr_trace must read both dumps and name the missing rank. The dry run (Gloo on the CPU)
# checks the two agents and the verdict only.
two_rank_hang() {
  local backend=nccl dir=$logs/two-rank-hang port i pids=() judge other
  [[ $mode == gpu ]] || backend=gloo
  mkdir -p "$dir"
  port=$(free_port)
  for i in 0 1; do
    NCCL_HOSTID="ddprun-node-$i" NCCL_SOCKET_IFNAME=lo TORCH_CPP_LOG_LEVEL=INFO DDPRUN_PYTHON=$python \
      "$build/bin/ddprun" --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" \
      --rdzv-id "two-rank-hang-$$" --rdzv-conf close_timeout=10 --local-addr "127.0.0.$((i + 1))" --max-restarts 0 \
      --hang-min-timeout 3 --hang-busy-timeout 8 --log-dir "$dir/node$i" "$root/tests/scripts/nccl_skip.py" \
      --backend "$backend" >"$dir/node$i.out" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do wait "${pids[$i]}" || true; done
  for i in 0 1; do echo "=== node $i"; cat "$dir/node$i.out"; done
  judge=$(grep -l '\] hang: ' "$dir/node0.out" "$dir/node1.out" | head -n 1 | grep -oE 'node[01]' || true)
  [[ -n $judge ]] || { echo "no agent judged the hang"; return 1; }
  echo "--- the hang was judged by $judge"
  [[ $mode == gpu ]] || return 0
  other=node1
  [[ $judge == node1 ]] && other=node0
  grep -q "NCCL flight recorder dump in" "$dir/$judge.out" || { echo "$judge named no dump of its own rank"; return 1; }
  grep -q "Observed flight recorder dump signal from another rank via TCPStore" "$dir/$other.out" ||
    { echo "the rank on $other (its agent never asked) did not see the store key"; return 1; }
  mkdir -p "$dir/dumps"
  cp "$dir"/node*/*/attempt_0/*/nccl_trace_rank_* "$dir/dumps/" || { echo "no dump files"; return 1; }
  ls -la "$dir/dumps"
  [[ $(find "$dir/dumps" -name 'nccl_trace_rank_*' | wc -l) -ge 2 ]] || { echo "fewer than two dumps"; return 1; }
  local trace
  trace=$("$python" -m torch.distributed.flight_recorder.fr_trace "$dir/dumps" -p nccl_trace_rank_ 2>&1) || true
  echo "$trace"
  grep -qiE 'missing.*\b1\b|\b1\b.*missing' <<<"$trace" || { echo "fr_trace did not name rank 1 as missing"; return 1; }
}

export root mode build python device jobs logs dataset data_dir
export -f facts unpack_deps configure build_launcher build_worker build_tests unit_tests free_port store_conformance \
  stock_ddp flight_recorder two_rank_hang

step facts 120 facts
if ((skip_build == 0)); then
  step deps 300 unpack_deps
  if [[ $mode == gpu ]]; then
    step configure 300 configure cuda
    step_ok configure || step configure-without-cuda 300 configure nocuda
  else
    step configure 300 configure nocuda
  fi
  if step_ok configure || step_ok configure-without-cuda; then
    step build-launcher 600 build_launcher
    [[ ${TRAINING:-1} == 0 ]] || step build-worker 600 build_worker
  fi
fi
if [[ -x $build/bin/ddprun ]]; then
  if [[ $mode == gpu ]]; then
    configs=("nccl 1 fp32" "nccl 1 bf16" "gloo 2 fp32")
  else
    configs=("gloo 1 fp32" "gloo 1 bf16" "gloo 2 fp32")
  fi
  # The speed table (tools/bench/gpu_speed.sh): C++ graphed and eager, Python DDP and captured, interleaved rounds.
  if [[ ${TRAINING:-1} != 0 && ${SPEED:-1} != 0 ]]; then
    speed_flags=()
    [[ $mode == gpu ]] || speed_flags=(--cpu-dry-run)
    [[ $mode == gpu ]] || export ROUNDS=${ROUNDS:-1} MORE_ROUNDS=${MORE_ROUNDS:-1}
    step speed 900 env BUILD_DIR="$build" PYTHON="$python" DATA_DIR="$data_dir" DATASET="$dataset" LOGS="$logs/speed" \
      bash "$root/tools/bench/gpu_speed.sh" "${speed_flags[@]}" --out "$out/gpu-speed.md"
  fi
  models=(mlp cnn)
  [[ ${TRAINING:-1} != 0 && ${EPOCH_TABLE:-1} != 0 ]] || models=()
  for model in "${models[@]}"; do
    for config in "${configs[@]}"; do
      read -r backend ranks precision <<<"$config"
      train cpp "$model" "$backend" "$ranks" "$precision"
      train python "$model" "$backend" "$ranks" "$precision"
    done
  done
  step store-conformance 180 store_conformance
  step stock-ddp-under-ddprun 180 stock_ddp
  [[ $mode != gpu ]] || step flight-recorder 120 flight_recorder
  [[ $mode != gpu ]] || step flight-recorder-store-key 60 env TORCH_CPP_LOG_LEVEL=INFO "$python" \
    "$root/tests/scripts/nccl_dump_key.py"
  [[ ${TWO_RANK_HANG:-1} == 0 ]] || step two-rank-hang 150 two_rank_hang
  if ((skip_build == 0)) && [[ ${UNIT_TESTS:-1} != 0 ]] && { step_ok configure || step_ok configure-without-cuda; }; then
    step build-tests 600 build_tests
  fi
  [[ ${UNIT_TESTS:-1} == 0 ]] || step unit-tests 300 unit_tests
else
  echo "[gpu-check] no ddprun in $build: build failed, training and store steps skipped"
fi

gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo unknown)
commit=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
"$python" - "$results" "$steps" "$mode" "${gpu_name:-none}" "$torch_version" "$commit" \
  "$(date -u +%Y-%m-%dT%H:%MZ)" "$dataset" "$(nproc)" >"$out/gpu-check.md" <<'EOF'
import json, sys
results, steps, mode, gpu, torch_version, commit, when, dataset, cpus = sys.argv[1:]
rows = {}
for line in open(results):
    impl, model, backend, ranks, precision, payload = line.rstrip("\n").split("\t", 5)
    rows[(impl, model, backend, int(ranks), precision)] = payload if payload in ("null", "nogloo", "skipped") else json.loads(payload)
title = "GPU check" if mode == "gpu" else "GPU check, CPU dry run (no GPU: Gloo on the CPU; NOT GPU numbers)"
print(f"### {title}: C++ worker vs Python DDP, one epoch of {dataset}")
print()
print(f"Machine: {gpu}; {cpus} CPUs; torch {torch_version}; commit {commit}; {when}. Batch 64 per rank, "
      "SGD lr 0.05 momentum 0.9, seed 0, OMP_NUM_THREADS=1; both launched by ddprun --standalone; samples/s = "
      "global samples / epoch train time (device synchronised; data loading and evaluation excluded).")
print()
print("| model | backend, ranks | precision | C++ epoch time | C++ samples/s | C++ test acc. "
      "| Python epoch time | Python samples/s | Python test acc. | C++ / Python |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
def cells(r):
    if r == "nogloo":
        return ["not run: worker has no Gloo", "–", "–"]
    if r == "skipped":
        return ["skipped (BUDGET_S)", "–", "–"]
    if not isinstance(r, dict):
        return ["failed", "–", "–"]
    return [f"{r['train_time_s']:.2f} s", f"{r['samples_per_s']:,.0f}", f"{r['test_accuracy'] * 100:.2f}%"]
keys = sorted({k[1:] for k in rows}, key=lambda k: (k[0] != "mlp", k[1] != "nccl", k[2], k[3] != "fp32"))
for model, backend, ranks, precision in keys:
    cpp, py = rows.get(("cpp", model, backend, ranks, precision)), rows.get(("python", model, backend, ranks, precision))
    ratio = f"{cpp['samples_per_s'] / py['samples_per_s']:.2f}×" if isinstance(cpp, dict) and isinstance(py, dict) else "–"
    setup = f"{backend}, {ranks} rank{'s' if ranks > 1 else ''}" + (" sharing 1 GPU" if ranks > 1 and mode == "gpu" else "")
    print(f"| {model} | {setup} | {precision} | " + " | ".join(cells(cpp) + cells(py)) + f" | {ratio} |")
print()
print("| step | result | seconds |")
print("|---|---|---:|")
for line in open(steps):
    name, result, seconds = line.rstrip("\n").split("\t")
    print(f"| {name} | {result} | {seconds} |")
EOF
cat "$out/gpu-check.md"
[[ ! -f $out/gpu-speed.md ]] || cat "$out/gpu-speed.md"
echo "[gpu-check] written: $out/gpu-check.md, $out/gpu-speed.md, $out/results.tsv, $out/gpu-check-logs.tar.gz"
if grep -qv -e $'\tok\t' -e $'\tnot run: ' "$steps"; then exit 1; fi
