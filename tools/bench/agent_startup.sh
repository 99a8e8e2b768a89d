#!/usr/bin/env bash
# One agent's start-up cost: the CPU a node's agent has used by the time it waits in a c10d rendezvous (exec, the
# dynamic linker, option parsing, its helper processes and threads, connecting and joining), ddprun and torchrun
# 1.13 side by side in one run. This is what a thousand agents started on one host pay each before the last of
# them joins (the 1,024-node row of rendezvous_vs_torchrun.sh), and what every node pays at every job start.
# Each sample: a fresh 3-node job on loopback whose node 1 (a ddprun) hosts the store; the measured agent joins as
# node 2 and waits for node 3, which never comes. Its CPU is the sum of /proc/<pid>/task/*/schedstat over the
# agent and its child processes (ddprun's orphan guard; torchrun has none) once that sum stops growing.
# torchrun 1.13 has no --local_addr; its node joins under its host name.
# Usage: tools/bench/agent_startup.sh [--out FILE]    env: REPEATS=15, TORCHRUN=1 (0: ddprun only), DDPRUN=<binary>
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/tools/bench/out_arg.sh" "$@"
repeats=${REPEATS:-15}
with_torchrun=${TORCHRUN:-1}
ddprun=${DDPRUN:-$root/build/bin/ddprun}
[[ -x $ddprun ]] || { echo "$0: build first (tools/build.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
export TMPDIR=$tmp  # run reports (ddprun_*/, torchelastic_*/) go here and away with it
host=""
agent=""
cleanup() {
  for pid in $agent $host; do pkill -KILL -P "$pid" 2>/dev/null || true; kill -KILL "$pid" 2>/dev/null || true; done
}
trap 'cleanup; rm -rf "$tmp"' EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# CPU in µs of a process and its children, all threads (schedstat: nanoseconds on the CPU).
cpu_us() {
  local total=0 pid file run rest
  for pid in "$1" $(pgrep -P "$1" || true); do
    for file in /proc/"$pid"/task/*/schedstat; do
      read -r run rest <"$file" 2>/dev/null || continue
      total=$((total + run))
    done
  done
  echo $((total / 1000))
}

# Waits until the agent's CPU has not grown by more than 0.2 ms over 300 ms (it waits in the rendezvous); at most
# 30 s. Prints that CPU in µs.
settled_cpu_us() {
  local before after
  before=$(cpu_us "$1")
  for _ in $(seq 100); do
    sleep 0.3
    after=$(cpu_us "$1")
    if ((after - before < 200)); then
      echo "$after"
      return
    fi
    before=$after
  done
  echo "$0: the agent never settled in the rendezvous" >&2
  exit 1
}

sample() {  # sample ddprun|torchrun i
  local which=$1 port id
  port=$(free_port)
  id=startup-$$-$2
  "$ddprun" --nnodes 3 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "$id" \
    --local-addr 127.0.0.1 --no-python true >"$tmp/host.log" 2>&1 &
  host=$!
  # The store answers once node 1 serves it.
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.05
  done
  if [[ $which == ddprun ]]; then
    "$ddprun" --nnodes 3 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "$id" \
      --local-addr 127.0.0.2 --no-python true >"$tmp/agent.log" 2>&1 &
  else
    /usr/bin/python3 -m torch.distributed.run --nnodes 3 --nproc_per_node 1 --rdzv_backend c10d \
      --rdzv_endpoint "127.0.0.1:$port" --rdzv_id "$id" --redirects 1 --tee 1 \
      --no_python true >"$tmp/agent.log" 2>&1 &
  fi
  agent=$!
  settled_cpu_us "$agent"
  cleanup
  wait 2>/dev/null || true
  agent="" host=""
}

emit() {
  echo "$1"
  [[ -n $out ]] && echo "$1" >>"$out"
  return 0
}

echo "== one agent's CPU until it waits in a c10d rendezvous, $(nproc) CPUs, $repeats samples each"
tools=(ddprun)
((with_torchrun)) && tools+=(torchrun)
declare -A result
for which in "${tools[@]}"; do
  values=()
  for ((i = 0; i < repeats; i++)); do values+=("$(sample "$which" "$i")"); done
  result[$which]=$(printf '%s\n' "${values[@]}" | median)
  echo "$which: $(printf '%s ' "${values[@]}")µs"
done
row="| agent start-up CPU until it waits in the rendezvous (median of $repeats) | ddprun $(awk -v v="${result[ddprun]}" 'BEGIN {printf "%.1f", v / 1000}') ms |"
if [[ -n ${result[torchrun]:-} ]]; then
  row="$row torchrun 1.13 $(awk -v v="${result[torchrun]}" 'BEGIN {printf "%.0f", v / 1000}') ms ($(awk -v t="${result[torchrun]}" -v d="${result[ddprun]}" 'BEGIN {printf "%.0f", t / d}')× ddprun's) |"
fi
emit "$row"
