#!/usr/bin/env bash
# A large idle job: NODES ddprun agents (c10d rendezvous on loopback, one `sleep` worker each, torchrun's
# default heartbeats: keep_alive_interval 5 s x keep_alive_max_attempt 3) once every node runs. Measured:
#  - the CPU the rendezvous store uses while the job idles (its thread, ddprun-store, in node 1's agent; and
#    that whole agent), in % of one core over WINDOW seconds, and all agents' together;
#  - a node killed with SIGKILL: seconds from the kill to the first line of any node that removes it: "…'s connection
#    to the store closed" (its closed connection, at once) or "stopped heartbeating" (the heartbeat timeout);
#    SEEN_BY=heartbeat kills with SIGSTOP instead (a node that hangs without closing its connection, as a machine
#    that vanished), so only the heartbeats can find it
#    (goal: within the heartbeat timeout, 15 s, plus one check period).
# Each agent runs with --monitor-interval MONITOR (default 5 s, torchrun 1.13's default): at ddprun's 0.1 s,
# 1,024 agents on one 2-vCPU machine wake 10,000 times a second between them and starve everything else.
# Usage: tools/bench/rendezvous_idle.sh [--out FILE]   (env: NODES=1024 WINDOW=20 MONITOR=5 SEEN_BY=connection|heartbeat
#   PERF=FILE: record the store thread with perf meanwhile; DDPRUN=<binary>: another build, e.g. for an A/B)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/tools/bench/out_arg.sh" "$@"
nodes=${NODES:-1024}
window=${WINDOW:-20}
monitor=${MONITOR:-5}
ddprun=${DDPRUN:-$root/build/bin/ddprun}
[[ -x $ddprun ]] || { echo "$0: build first (tools/build.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
export TMPDIR=$tmp  # the agents' run reports (ddprun_*/) go here and away with it
trap '{ pkill -KILL -f "rdzv.id.idle-$$"; wait; } 2>/dev/null; rm -rf "$tmp"' EXIT
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
node_addr() { echo "127.0.$((($1 - 1) / 250)).$((($1 - 1) % 250 + 1))"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }  # utime + stime, clock ticks

pids=()
for ((i = 1; i <= nodes; i++)); do
  "$ddprun" --nnodes "$nodes" --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" \
    --rdzv-id "idle-$$" --monitor-interval "$monitor" --local-addr "127.0.$(((i - 1) / 250)).$(((i - 1) % 250 + 1))" --no-python sleep 900 \
    >"$tmp/$i.log" 2>&1 &
  pids+=($!)
done
# Readiness: every node has started its worker (bounded: 10 minutes).
for ((t = 0; t < 600; t++)); do
  started=$( (grep -l "started 1 worker" "$tmp"/*.log 2>/dev/null || true) | wc -l)
  ((started == nodes)) && break
  sleep 1
done
((started == nodes)) || { echo "$0: only $started of $nodes nodes started their workers" >&2; exit 1; }
echo "== $nodes idle nodes running; measuring for ${window} s"
# The store's own thread in node 1 (named ddprun-store), apart from that agent's other work.
store_tid=$(grep -l "^ddprun-store$" /proc/"${pids[0]}"/task/*/comm | head -1 | awk -F/ '{print $5}')
store_before=$(cpu_ticks "${pids[0]}/task/$store_tid")
host_before=$(cpu_ticks "${pids[0]}")
all_before=0
for pid in "${pids[@]}"; do all_before=$((all_before + $(cpu_ticks "$pid"))); done
if [[ -n ${PERF:-} ]]; then  # where the store's thread spends its time: perf report -i "$PERF"
  perf record -g -t "$store_tid" -o "$PERF" -- sleep "$window" 2>/dev/null
else
  sleep "$window"
fi
host_after=$(cpu_ticks "${pids[0]}")
store_after=$(cpu_ticks "${pids[0]}/task/$store_tid")
all_after=0
for pid in "${pids[@]}"; do all_after=$((all_after + $(cpu_ticks "$pid"))); done
hz=$(getconf CLK_TCK)
host_pct=$(awk -v d=$((host_after - host_before)) -v hz="$hz" -v w="$window" 'BEGIN {printf "%.1f", 100 * d / hz / w}')
store_pct=$(awk -v d=$((store_after - store_before)) -v hz="$hz" -v w="$window" 'BEGIN {printf "%.1f", 100 * d / hz / w}')
all_pct=$(awk -v d=$((all_after - all_before)) -v hz="$hz" -v w="$window" 'BEGIN {printf "%.1f", 100 * d / hz / w}')

victim=$((nodes / 2 + 1))
killed_at=$(date +%s.%N)
if [[ ${SEEN_BY:-connection} == heartbeat ]]; then kill -STOP "${pids[$((victim - 1))]}"; else kill -KILL "${pids[$((victim - 1))]}"; fi
seen=""
for ((t = 0; t < 600; t++)); do
  line=$(grep -h -e "stopped heartbeating" -e "connection to the store closed" "$tmp"/*.log 2>/dev/null | head -1 || true)
  if [[ -n $line ]]; then
    stamp=$(sed -E 's/^\[([^]]*)\].*/\1/' <<<"$line")
    seen=$(awk -v a="$(date -d "$stamp" +%s.%N)" -v b="$killed_at" 'BEGIN {printf "%.1f", a - b}')
    break
  fi
  sleep 0.1
done
row="| $nodes idle nodes (--monitor-interval $monitor) | the store's thread ${store_pct}% of one core (its whole agent ${host_pct}%) | all agents ${all_pct}% | killed node $(node_addr "$victim") (${SEEN_BY:-connection}) seen after ${seen:-never} s (timeout 15 s) |"
echo "$row"
[[ -n $out ]] && echo "$row" >>"$out"
exit 0
