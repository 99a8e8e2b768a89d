#!/usr/bin/env bash
# A chaos run of node kills in an elastic job: NODES ddprun agents on this machine's loopback (--nnodes NODES,
# the dynamic rendezvous on BACKEND, torchrun's heartbeats: keep_alive_interval 5 s x 3; one C++ worker per node
# training the carried MNIST sample, checkpoints every 20 steps in one shared directory). For DURATION seconds,
# every KILL_MIN..KILL_MAX seconds (uniformly random), the ddprun of a random node other than node 1 (the store's
# host and rank 0) is killed with SIGKILL and a new ddprun takes its place at the same address, as a scheduler
# would restart a failed machine; then the job runs to its end. The same job runs once uninterrupted first.
# Reports: kills, restarts spent by the survivors (ddprun: "worker group failed; restart", expected 0: a node's
# death is a membership change), membership changes counted from worker failures, median and slowest time from a
# kill to training again, whether the final checkpoint is bit-identical to the uninterrupted run's
# (tools/bench/checkpoint_equal.py, stock PyTorch), and processes left behind.
# Usage: tools/bench/node_chaos.sh [--out FILE]
#   env: NODES=4 EPOCHS=600 DURATION=300 KILL_MIN=2 KILL_MAX=8 START_METHOD=forkserver BACKEND=c10d (or etcd-v3:
#   a private Debian etcd on loopback) SEED=1 (the kill schedule)
# Every round has NODES nodes (the survivors wait for the replacement), so the world size never changes and an
# uninterrupted run of the same world size is the reference.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/tools/bench/out_arg.sh" "$@"
nodes=${NODES:-4}
epochs=${EPOCHS:-600}
duration=${DURATION:-300}
kill_min=${KILL_MIN:-2}
kill_max=${KILL_MAX:-8}
start_method=${START_METHOD:-forkserver}
backend=${BACKEND:-c10d}
RANDOM=${SEED:-1}
ddprun=$root/build/bin/ddprun
worker=$root/build/bin/worker
[[ -x $ddprun && -x $worker ]] || { echo "$0: build first (tools/build.sh)" >&2; exit 1; }
((nodes >= 2)) || { echo "$0: NODES must be at least 2" >&2; exit 2; }
[[ $backend == c10d || $backend == etcd-v3 ]] || { echo "$0: BACKEND must be c10d or etcd-v3, not '$backend'" >&2; exit 2; }
tmp=$(mktemp -d)
export TMPDIR=$tmp OMP_NUM_THREADS=1
etcd_pid=""
cleanup() {
  pkill -KILL -f "rdzv.id.chaos-$$" 2>/dev/null || true
  [[ -n $etcd_pid ]] && { kill -9 "$etcd_pid"; wait "$etcd_pid"; } 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
conf="last_call_timeout=1,keep_alive_interval=5,keep_alive_max_attempt=3,join_timeout=120,close_timeout=60"
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
stamps_ms() {  # milliseconds since the epoch of every line matching PATTERN in FILES ("[YYYY-mm-dd HH:MM:SS.mmm]")
  local pattern=$1 stamp
  shift
  cat "$@" | grep -- "$pattern" | grep -o '\[20[0-9-]* [0-9:.]*\]' | tr -d '[]' | while read -r stamp; do
    echo $(($(date -d "$stamp" +%s%N) / 1000000))
  done | sort -n
}

endpoint=""
if [[ $backend == etcd-v3 ]]; then
  command -v etcd >/dev/null || { echo "$0: etcd is missing (tools/setup.sh installs Debian's etcd-server)" >&2; exit 1; }
  port=$(free_port) peer=$(free_port)
  etcd --data-dir "$tmp/etcd" --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "default=http://127.0.0.1:$peer" >"$tmp/etcd.log" 2>&1 &
  etcd_pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
  endpoint=127.0.0.1:$port
fi

# start_node RUN INDEX LOG: starts one node's ddprun in the background; its pid in $started.
start_node() {
  local run=$1 i=$2 log=$3
  "$ddprun" --nnodes "$nodes" --nproc-per-node 1 --rdzv-backend "$backend" --rdzv-endpoint "$run_endpoint" \
    --rdzv-id "chaos-$$-$run" --rdzv-conf "$conf" --local-addr "127.0.0.$i" --max-restarts 1000 \
    --start-method "$start_method" --log-dir "$tmp/$run/logs" "$worker" --data-dir "$root/data/mnist" \
    --epochs "$epochs" --checkpoint-every 20 --checkpoint-dir "$tmp/$run/ck" --log-every 100000 >"$log" 2>&1 &
  started=$!
}

# run_job RUN CHAOS: one whole job; with CHAOS=1 the kills. Sets kills, spent, counted, agains (ms per kill).
run_job() {
  local run=$1 chaos=$2 i pids=() logs=() started
  run_endpoint=${endpoint:-127.0.0.1:$(free_port)}
  mkdir -p "$tmp/$run/ck"
  for ((i = 1; i <= nodes; i++)); do
    start_node "$run" "$i" "$tmp/$run/node$i-0.log"
    pids[i]=$started logs+=("$tmp/$run/node$i-0.log")
  done
  kills=0 kill_times=()
  if ((chaos)); then
    local begin deadline next victim
    until compgen -G "$tmp/$run/ck/*" >/dev/null; do sleep 0.05; done
    begin=$(now_ms)
    deadline=$((begin + duration * 1000))
    while true; do
      next=$(($(now_ms) + (kill_min * 1000) + RANDOM % ((kill_max - kill_min) * 1000 + 1)))
      while (($(now_ms) < next)) && kill -0 "${pids[1]}" 2>/dev/null; do sleep 0.05; done
      (($(now_ms) < deadline)) && kill -0 "${pids[1]}" 2>/dev/null || break
      victim=$((2 + RANDOM % (nodes - 1)))
      kill_times+=("$(now_ms)")
      kill -9 "${pids[victim]}" 2>/dev/null || true
      wait "${pids[victim]}" 2>/dev/null || true  # reaped here, without bash's "Killed" line
      kills=$((kills + 1))
      start_node "$run" "$victim" "$tmp/$run/node$victim-$kills.log"
      pids[victim]=$started logs+=("$tmp/$run/node$victim-$kills.log")
      printf '\r%s: %d kills, %d s' "$run" "$kills" $((($(now_ms) - begin) / 1000)) >&2
    done
    echo >&2
  fi
  local failed=0
  for ((i = 1; i <= nodes; i++)); do
    wait "${pids[i]}" || { echo "$run: node $i (pid ${pids[i]}) exited $?; its log: ${logs[*]: -1}" >&2; failed=1; }
  done
  ((failed == 0)) || { tail -20 "$tmp/$run/node1-0.log" >&2; return 1; }
  spent=$(cat "${logs[@]}" | grep -c "worker group failed; restart" || true)
  counted=$(cat "${logs[@]}" | grep -c "counted as a membership change" || true)
  agains=()
  local steps k t
  steps=$(stamps_ms "first training step of attempt" "${logs[@]}")
  for t in "${kill_times[@]}"; do
    k=$(awk -v t="$t" '$1 > t {print $1 - t; exit}' <<<"$steps")
    agains+=("${k:--}")
  done
}

echo "== chaos: $nodes nodes ($backend on loopback, keep_alive 5 s x 3), --start-method $start_method, $epochs epochs, kill -9 every $kill_min-$kill_max s for $duration s"
start=$(now_ms)
run_job reference 0
reference_s=$((($(now_ms) - start) / 1000))
echo "uninterrupted: ${reference_s} s"
start=$(now_ms)
run_job chaos 1
chaos_s=$((($(now_ms) - start) / 1000))
ref_ck=$(ls "$tmp/reference/ck"/checkpoint-*.pt | tail -1)
chaos_ck=$(ls "$tmp/chaos/ck"/checkpoint-*.pt | tail -1)
same=$(/usr/bin/python3 "$root/tools/bench/checkpoint_equal.py" "$ref_ck" "$chaos_ck" || true)
left=$(pgrep -f "chaos-$$-" | wc -l || true)
again_median=$(printf '%s\n' "${agains[@]}" | grep -v -- - | median)
again_max=$(printf '%s\n' "${agains[@]}" | grep -v -- - | sort -n | tail -1)
line="| $nodes nodes, $backend, $start_method | $kills kills in ${duration} s | restarts spent: $spent | failures counted as membership changes: $counted | training again after a kill: median ${again_median} ms, slowest ${again_max} ms | final checkpoint vs uninterrupted: $same ($(basename "$chaos_ck")) | job ${chaos_s} s (uninterrupted ${reference_s} s) | processes left: $left |"
echo "$line"
[[ -n $out ]] && echo "$line" >>"$out"
exit 0
