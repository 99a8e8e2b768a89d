#!/usr/bin/env bash
# Supervision while a client attacks the agent's own store (the workers' store runs on the agent's loop, so every
# request it serves is time the loop does not supervise): a 2-rank job whose rank 1 exits 1 in each of the first
# ATTEMPTS attempts (--max-restarts ATTEMPTS, group restarts), first idle, then with `store_bench attack` on its
# MASTER_PORT for each ATTACKS kind, side by side in one run:
#  - exit -> log: rank 1 prints its clock (ns) and exits; ddprun's "rank 1 (pid …) exited with code 1" line;
#  - respawn: ddprun's own "attempt N: restarted 2 workers, X ms after the failure was seen".
# Median and max over the attempts. `refused_writes` is not store_bench's: another user (nobody, through setpriv, so
# run this as root) tries a write 5 times a second, each on a fresh connection and each refused, while a helper holds
# TCP_SOCKETS loopback sockets so that the host's TCP table is that long.
# Usage: tools/bench/supervision_under_attack.sh (env: ATTEMPTS=10, ATTACKS="gone_cas gone_gets refused_writes",
# TCP_SOCKETS=30000)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
attempts=${ATTEMPTS:-10}
attacks=${ATTACKS:-gone_cas gone_gets refused_writes}
sockets=${TCP_SOCKETS:-30000}
ddprun=$root/build/bin/ddprun
bench=$root/build/bin/store_bench
[[ -x $ddprun && -x $bench ]] || { echo "$0: build first (tools/build.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
attack_pid=""
table_pid=""
trap 'kill $attack_pid 2>/dev/null || true; rm -rf "$tmp"' EXIT
[[ -n ${KEEP:-} ]] && trap - EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
stats() { sort -n | awk '{v[NR]=$1} END {printf "%.1f / %.1f ms (n=%d)", v[int((NR+1)/2)], v[NR], NR}'; }
# Rank 1 fails until the last attempt, after ddprun's start-up window (1 s, in which it holds a failure 200 ms to
# gather the others'); rank 0 runs on meanwhile.
worker='if [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" -lt '$attempts' ]; then sleep 1.2;
  echo "exit_at $(date +%s%N)"; exit 1; fi; sleep 1.5'

# Holds $1 TCP sockets (loopback connection pairs) while process $2 lives, in as many processes as the open-file limit
# needs; prints "ready" once they are all open.
hold_sockets='import os, resource, socket, sys, time
total, script = int(sys.argv[1]), int(sys.argv[2])
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
each = max(2, (hard - 100) // 2 * 2)
for start in range(each, total, each):  # the first share stays here, the rest go to children
    if os.fork() == 0:
        total = min(each, total - start)
        break
else:
    total = min(each, total)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
listener = socket.socket(); listener.bind(("127.0.0.1", 0)); listener.listen(4096)
held = []
for _ in range(total // 2):
    held.append(socket.create_connection(listener.getsockname())); held.append(listener.accept()[0])
print("ready", flush=True)
while os.path.exists("/proc/%d" % script):
    time.sleep(1)'

run() {  # $1: attack (idle = none) -> "exit->log|respawn"
  local port log
  port=$(free_port)
  log=$tmp/$1.log
  if [[ $1 == refused_writes ]]; then
    local helpers=$(((sockets + $(ulimit -Hn) - 101) / ($(ulimit -Hn) - 100)))
    setsid /usr/bin/python3 -c "$hold_sockets" "$sockets" $$ >"$tmp/table.out" 2>&1 &
    table_pid=$!
    for _ in $(seq 1200); do (($(grep -c ready "$tmp/table.out") >= helpers)) && break; sleep 0.05; done
    (($(grep -c ready "$tmp/table.out") >= helpers)) || echo "$0: cannot hold $sockets sockets" >&2
    echo "TCP table: $(($(wc -l </proc/net/tcp) - 1)) lines" >"$tmp/refused.note"
  fi
  "$ddprun" --nproc-per-node 2 --master-addr 127.0.0.1 --master-port "$port" --max-restarts "$attempts" \
    --no-python sh -c "$worker" >"$log" 2>&1 &
  local job=$!
  if [[ $1 != idle ]]; then
    # Once the store listens (its first log line), until the job ends.
    for _ in $(seq 100); do grep -q "store listening" "$log" && break; sleep 0.05; done
    if [[ $1 == refused_writes ]]; then
      setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 \
        -c "$(cat "$root/tests/scripts/foreign_store_writer.py")" "$port" \
        //worker/attempt_0/ddprun_generation_counter --count 0 --per-second 5 >"$tmp/refused.out" 2>&1 &
    else
      "$bench" attack "$port" "$1" 600 >/dev/null 2>&1 &
    fi
    attack_pid=$!
  fi
  wait $job || true
  kill $attack_pid 2>/dev/null || true
  [[ -z $table_pid ]] || kill -- -"$table_pid" 2>/dev/null || true
  wait $attack_pid $table_pid 2>/dev/null || true
  attack_pid=""
  table_pid=""
  # The n-th "exit_at" with the n-th "exited with code 1" line (the relayed line may come after ddprun's own;
  # ddprun's stamps are local time, ms).
  local exitlog
  exitlog=$(paste <(grep -oE "exit_at [0-9]+" "$log" | awk '{print $2}') \
    <(grep "exited with code 1" "$log" | grep -oE "^\[[0-9-]+ [0-9:.]+\]" | tr -d '[]' |
      while read -r stamp; do date -d "$stamp" +%s%N; done) |
    awk 'NF == 2 {printf "%.3f\n", ($2 - $1) / 1e6}' | stats)
  local respawn
  respawn=$(grep -oE "restarted 2 workers, [0-9.]+ ms" "$log" | awk '{print $4}' | stats)
  echo "$exitlog|$respawn"
}

echo "| store traffic | exit -> log (median / max) | respawn after the failure was seen (median / max) |"
echo "|---|---:|---:|"
for attack in idle $attacks; do
  IFS='|' read -r exitlog respawn <<<"$(run "$attack")"
  echo "| $attack | $exitlog | $respawn |"
done
if [[ -f $tmp/refused.out ]]; then
  echo
  echo "refused_writes: $(grep -c refused "$tmp/refused.out") refused, $(grep -c written "$tmp/refused.out") written;" \
    "$(cat "$tmp/refused.note")"
fi
