#!/usr/bin/env bash
# Store throughput: ddprun-store vs PyTorch's own TCPStore server (python3-torch 1.13, started from
# Python as torch.distributed.TCPStore(is_master=True)), side by side under the same load: 1, 8 and 64
# stock LibTorch c10d::TCPStore clients (build/bin/store_load, one thread each), OP = add (one round trip)
# and setget (set, then get = wait + get). Each cell is the median of REPEATS runs of SECONDS seconds,
# alternating servers. Prints a Markdown table; --out FILE also writes it there.
# Usage: tools/bench/store_vs_tcpstore.sh [--out FILE]   (env: REPEATS=3, SECONDS_PER_RUN=2)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=""
[[ ${1:-} == --out ]] && out=$2
repeats=${REPEATS:-3}
seconds=${SECONDS_PER_RUN:-2}
load=$root/build/bin/store_load
store=$root/build/bin/ddprun-store
[[ -x $load && -x $store ]] || { echo "$0: build first (tools/build.sh)" >&2; exit 1; }
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

ours_port=$(free_port)
theirs_port=$(free_port)
"$store" --port "$ours_port" --log-level warn >/dev/null &
ours_pid=$!
/usr/bin/python3 -c "
import datetime, time, torch.distributed as d
s = d.TCPStore('127.0.0.1', $theirs_port, 1, True, timeout=datetime.timedelta(seconds=600), wait_for_workers=False)
time.sleep(3600)" >/dev/null 2>&1 &
theirs_pid=$!
trap 'kill $ours_pid $theirs_pid 2>/dev/null' EXIT
sleep 3

median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
run() { "$load" 127.0.0.1 "$1" "$2" "$seconds" "$3" 2>/dev/null | sed 's/.*"ops_per_s": \([0-9.]*\).*/\1/'; }

table="| op | clients | ddprun-store ops/s | PyTorch TCPStore server ops/s | ratio |
|---|---:|---:|---:|---:|"
for op in add setget; do
  for clients in 1 8 64; do
    ours=() theirs=()
    for ((i = 0; i < repeats; i++)); do
      ours+=("$(run "$ours_port" "$clients" "$op")")
      theirs+=("$(run "$theirs_port" "$clients" "$op")")
    done
    o=$(printf '%s\n' "${ours[@]}" | median)
    t=$(printf '%s\n' "${theirs[@]}" | median)
    ratio=$(awk -v o="$o" -v t="$t" 'BEGIN {printf "%.2f×", o / t}')
    table+=$'\n'"| $op | $clients | $(printf '%.0f' "$o") | $(printf '%.0f' "$t") | $ratio |"
    echo "$op $clients: ours $o, theirs $t" >&2
  done
done
section="### Store throughput: ddprun-store vs PyTorch's TCPStore server

Median of $repeats runs of ${seconds} s each, servers alternating; clients are stock LibTorch 1.13
\`c10d::TCPStore\` objects, one thread each, on the same 2-vCPU machine as the server. \`setget\` counts
the set and the get as two operations. $(date -u +%Y-%m-%dT%H:%MZ), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown).

$table"
echo "$section"
[[ -n $out ]] && echo "$section" >"$out"
exit 0
