#!/usr/bin/env bash
# A normal client's latency under each attack on the store, before and after the hardening: the store of
# commit BASE (default: the last commit before the store's hardening), built once into build/bench-baseline from a temporary git worktree, and
# this tree's build/bin/ddprun-store, side by side in one run. For every (store, attack) a fresh server
# starts with the common soft open-file limit of 1,024 (the hard limit stays; a store may raise to it) and
# 3 GiB of address space (so a runaway allocation fails as on a loaded machine instead of swapping); the
# attack (build/bin/store_bench attack …) runs in the background, and after 1 s a normal client measures
# ADD round trips for SECONDS (p50/p99 in ms; "fresh" opens a new connection per ADD, as a newly started
# worker does). "died" means the server process was gone at the end.
# Usage: tools/bench/store_attacks.sh [--out FILE]   (env: SECONDS_PER_RUN=5, BASE=<commit>, ATTACKS="idle
# multiget_bomb unread_replies streamed_check dribble silent slow_close gone_gets gone_cas fill": idle always runs first)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=""
[[ ${1:-} == --out ]] && out=$2
seconds=${SECONDS_PER_RUN:-5}
base=${BASE:-d80dd13}
bench=$root/build/bin/store_bench
after=$root/build/bin/ddprun-store
before=$root/build/bench-baseline/build/bin/ddprun-store
[[ -x $bench && -x $after ]] || { echo "$0: build first (tools/build.sh)" >&2; exit 1; }
if [[ ! -x $before ]]; then
  echo "building the baseline store of $base" >&2
  worktree=$(mktemp -d)
  # A build interrupted earlier was configured from another temporary worktree: start it afresh.
  rm -rf "$root/build/bench-baseline"
  git -C "$root" worktree prune
  git -C "$root" worktree add -f --detach "$worktree" "$base" >&2
  cmake -S "$worktree" -B "$root/build/bench-baseline/build" -DCMAKE_BUILD_TYPE=Release -DDDPRUN_BUILD_TESTS=OFF >&2
  cmake --build "$root/build/bench-baseline/build" -j "$(nproc)" --target ddprun-store >&2
  git -C "$root" worktree remove --force "$worktree" >&2
fi
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
server_pid="" attack_pid="" decoy_pid=""
trap 'kill $server_pid $attack_pid $decoy_pid 2>/dev/null || true' EXIT

start_store() {  # $1: binary, $2: port
  (ulimit -S -n 1024; ulimit -v $((3 * 1024 * 1024)); exec "$1" --port "$2" --log-level error >/dev/null 2>&1) &
}

run() {  # $1: store binary, $2: attack (idle = none), $3: latency mode (persistent|fresh), $4: "control" to
         # attack a second store instead -> "p50 / p99 (notes)|p99"
  local port target result alive
  port=$(free_port)
  start_store "$1" "$port"
  server_pid=$!
  target=$port
  if [[ ${4:-} == control ]]; then
    target=$(free_port)
    start_store "$1" "$target"
    decoy_pid=$!
  fi
  sleep 0.3
  if [[ $2 != idle ]]; then
    "$bench" attack "$target" "$2" "$((seconds + 2))" >/dev/null 2>&1 &
    attack_pid=$!
    sleep 1
  fi
  result=$("$bench" latency "$port" "$seconds" $([[ $3 == fresh ]] && echo fresh) || true)
  alive=yes
  kill -0 "$server_pid" 2>/dev/null || alive=no
  [[ -n $attack_pid ]] && { kill "$attack_pid" 2>/dev/null; wait "$attack_pid" 2>/dev/null || true; }
  kill "$server_pid" $decoy_pid 2>/dev/null; wait "$server_pid" $decoy_pid 2>/dev/null || true
  server_pid="" attack_pid="" decoy_pid=""
  echo "$1 $2 $3 ${4:-}: $result alive=$alive" >&2
  /usr/bin/python3 -c "
import json, sys
r, alive = json.loads(sys.argv[1]), sys.argv[2]
cell = '%.3f / %.3f' % (r['p50_ms'], r['p99_ms']) if r['samples'] else 'no reply'
notes = []
if r['errors']: notes.append('%d errors' % r['errors'])
if alive == 'no': notes.append('died')
print(cell + (' (' + ', '.join(notes) + ')' if notes else '') + '|' + str(r['p99_ms']))" "$result" "$alive"
}

table="| attack | normal client | before ($base): p50 / p99 ms | after: p50 / p99 ms | after p99 / after idle p99 | control (after; attack on another store): p50 / p99 ms |
|---|---|---:|---:|---:|---:|"
declare -A idle99 seen_idle
for mode in persistent fresh; do
  for attack in idle ${ATTACKS:-multiget_bomb unread_replies streamed_check dribble silent slow_close gone_gets gone_cas fill}; do
    [[ $attack == idle && ${seen_idle[$mode]:-} == yes ]] && continue
    [[ $attack == idle ]] && seen_idle[$mode]=yes
    [[ $mode == fresh && $attack != idle && $attack != silent ]] && continue
    b=$(run "$before" "$attack" "$mode")
    a=$(run "$after" "$attack" "$mode")
    a99=${a##*|}
    [[ $attack == idle ]] && idle99[$mode]=$a99
    ratio=$(awk -v a="$a99" -v i="${idle99[$mode]}" 'BEGIN {if (a < 0 || i <= 0) print "n/a"; else printf "%.2f×", a / i}')
    control="–"
    [[ $attack != idle ]] && { c=$(run "$after" "$attack" "$mode" control); control=${c%|*}; }
    table+=$'\n'"| $attack | $mode | ${b%|*} | ${a%|*} | $ratio | $control |"
  done
done
section="### A normal client's latency under attack, before and after

$seconds s of ADD round trips (1 ms apart) per cell while the attack runs; one fresh server per cell (soft
open-file limit 1,024, 3 GiB address space); 2 vCPUs shared by server, attacker and client.
$(date -u +%Y-%m-%dT%H:%MZ), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown).

$table"
echo "$section"
[[ -n $out ]] && echo "$section" >"$out"
exit 0
