#!/usr/bin/env bash
# A node killed with -9 in an elastic job, ddprun and torchrun 1.13 side by side in one run: NODES agents on
# this machine's loopback (--nnodes 2:NODES, c10d rendezvous, one C++ worker each training the carried MNIST
# sample with checkpoints in one shared directory, torchrun's heartbeats: keep_alive_interval 5 s x 3,
# last_call_timeout 1 s), the last node's agent killed with SIGKILL once a checkpoint exists. Measured from the
# kill, on the first node: its ddprun's "starting a new rendezvous round" (the node lost is seen and the new
# round begins), "rendezvous round 1 complete" (the new round formed: with fewer than MAX nodes left it waits out
# the last call), and the worker's "first training step of attempt 1" (training again; the same worker line
# under torchrun), and whether the survivors spent a restart (ddprun: "worker group failed; restart").
# Median of REPEATS. START_METHOD=forkserver starts ddprun's ranks from a template (the data decoded once).
# Usage: tools/bench/node_kill.sh [--out FILE]
#   env: NODES=4 REPEATS=3 TORCHRUN=1 (0: skip torchrun; only: skip ddprun) START_METHOD=spawn
# A ddprun node dies with its agent: kill -9 of ddprun (its guardian and PR_SET_PDEATHSIG end its workers).
# torchrun 1.13 has neither, and its killed agent's worker would train on with the others, so there the whole
# node is killed: the agent's process group (its worker included).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/tools/bench/out_arg.sh" "$@"
nodes=${NODES:-4}
repeats=${REPEATS:-3}
with_torchrun=${TORCHRUN:-1}
start_method=${START_METHOD:-spawn}
cpus=$(getconf _NPROCESSORS_ONLN)  # not nproc: it obeys OMP_NUM_THREADS, set to 1 below
ddprun=$root/build/bin/ddprun
worker=$root/build/bin/worker
[[ -x $ddprun && -x $worker ]] || { echo "$0: build first (tools/build.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
export TMPDIR=$tmp OMP_NUM_THREADS=1
trap 'pkill -KILL -f "rdzv.id.kill-$$" 2>/dev/null || true; rm -rf "$tmp"' EXIT
conf="last_call_timeout=1,keep_alive_interval=5,keep_alive_max_attempt=3,join_timeout=120,close_timeout=20"
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# Milliseconds since the epoch of the first line matching PATTERN in the FILES that is stamped after AFTER_MS
# ("[YYYY-mm-dd HH:MM:SS.mmm]"), or nothing.  Usage: first_after AFTER_MS PATTERN FILES...
first_after() {
  local after=$1 pattern=$2 stamp ms best=""
  shift 2
  while read -r stamp; do
    ms=$(($(date -d "$stamp" +%s%N) / 1000000))
    ((ms > after)) && [[ -z $best || $ms -lt $best ]] && best=$ms
  done < <(cat "$@" | grep -- "$pattern" | grep -o '\[20[0-9-]* [0-9:.]*\]' | tr -d '[]')
  echo "$best"
}

# run_once ddprun|torchrun REPEAT: prints "<round begins ms> <round complete ms> <training again ms> <restarts>".
run_once() {
  local which=$1 r=$2 port dir pids=() i
  port=$(free_port)
  dir=$tmp/$which-$r
  mkdir -p "$dir/ck"
  local args=(--data-dir "$root/data/mnist" --epochs 200 --checkpoint-every 20 --checkpoint-dir "$dir/ck" --log-every 100000)
  for ((i = 1; i <= nodes; i++)); do
    if [[ $which == ddprun ]]; then
      "$ddprun" --nnodes "2:$nodes" --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" \
        --rdzv-id "kill-$$-$r" --rdzv-conf "$conf" --local-addr "127.0.0.$i" --max-restarts 3 --start-method "$start_method" "$worker" "${args[@]}" \
        >"$dir/node$i.log" 2>&1 &
    else
      setsid /usr/bin/python3 -m torch.distributed.run --nnodes "2:$nodes" --nproc_per_node 1 --rdzv_backend c10d \
        --rdzv_endpoint "127.0.0.1:$port" --rdzv_id "kill-$$-$r" --rdzv_conf "$conf" --max_restarts 3 \
        --monitor_interval 0.1 --redirects 1 --tee 1 --no_python "$worker" "${args[@]}" >"$dir/node$i.log" 2>&1 &
    fi
    pids+=($!)
  done
  local deadline=$(($(now_ms) + 120000))
  until compgen -G "$dir/ck/*" >/dev/null; do
    (($(now_ms) < deadline)) || { echo "no checkpoint within 120 s" >&2; return 1; }
    sleep 0.05
  done
  local killed logs=()
  for ((i = 1; i < nodes; i++)); do logs+=("$dir/node$i.log"); done
  killed=$(now_ms)
  if [[ $which == ddprun ]]; then kill -9 "${pids[-1]}"; else kill -9 -- "-${pids[-1]}"; fi
  # Training again: the first "first training step" line after the kill, in any survivor's log (torchrun puts
  # rank 0 on whichever node, and keeps TORCHELASTIC_RESTART_COUNT at 0 across membership changes).
  local again="" begins="" round="" spent="-"
  deadline=$(($(now_ms) + 120000))
  while [[ -z $again ]]; do
    (($(now_ms) < deadline)) || { echo "$which: no training again within 120 s" >&2; tail -3 "$dir"/node1.log >&2; return 1; }
    sleep 0.1
    again=$(first_after "$killed" "first training step of attempt" "${logs[@]}")
  done
  again=$((again - killed))
  if [[ $which == ddprun ]]; then
    begins=$(($(first_after "$killed" "starting a new rendezvous round" "${logs[@]}") - killed))
    round=$(($(first_after "$killed" "rendezvous round 1 complete" "${logs[@]}") - killed))
    spent=$(cat "${logs[@]}" | grep -c "worker group failed; restart" || true)
  fi
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  pkill -KILL -f "rdzv.id.kill-$$-$r" 2>/dev/null || true
  pkill -KILL -f "$dir/ck" 2>/dev/null || true  # the killed torchrun agent's worker lives on (no orphan guard)
  wait 2>/dev/null || true
  echo "${begins:--} ${round:--} $again $spent"
}

emit() {
  echo "$1"
  [[ -n $out ]] && echo "$1" >>"$out"
  return 0
}

echo "== kill -9 of one of $nodes nodes (c10d on loopback, keep_alive 5 s x 3, last call 1 s), $cpus CPUs, ddprun --start-method $start_method"
for which in ddprun torchrun; do
  [[ $which == torchrun && $with_torchrun == 0 ]] && continue
  [[ $which == ddprun && $with_torchrun == only ]] && continue
  begins_all=() rounds=() agains=() spents=()
  for ((r = 0; r < repeats; r++)); do
    read -r begins round again spent < <(run_once "$which" "$r")
    echo "$which run $r: new round begins ${begins} ms, complete ${round} ms, training again ${again} ms, restarts spent ${spent}"
    begins_all+=("$begins") rounds+=("$round") agains+=("$again") spents+=("$spent")
  done
  if [[ $which == ddprun ]]; then
    emit "| ddprun ($start_method) | round begins $(printf '%s\n' "${begins_all[@]}" | median) ms | complete $(printf '%s\n' "${rounds[@]}" | median) ms | training again $(printf '%s\n' "${agains[@]}" | median) ms | runs: ${agains[*]} ms | restarts spent: ${spents[*]} |"
  else
    emit "| torchrun 1.13 | - | - | training again $(printf '%s\n' "${agains[@]}" | median) ms | runs: ${agains[*]} ms | - |"
  fi
done
