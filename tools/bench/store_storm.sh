#!/usr/bin/env bash
# Connection storm: N clients connect at once, ADD a counter, and WAIT for the key the last one sets; all
# must wake. ddprun-store against PyTorch's own TCPStore server (python3-torch 1.13, started from Python
# as torch.distributed.TCPStore(is_master=True)), a fresh server for every run, N = 1,024 … 16,384. The
# clients are one epoll loop in build/bin/store_bench (not N threads). Both servers and the clients run
# with the open-file limit raised to the hard limit. Prints a Markdown table; --out FILE also writes it.
# Usage: tools/bench/store_storm.sh [--out FILE]   (env: SIZES="1024 2048 4096 8192 16384")
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=""
[[ ${1:-} == --out ]] && out=$2
sizes=${SIZES:-1024 2048 4096 8192 16384}
bench=$root/build/bin/store_bench
store=$root/build/bin/ddprun-store
[[ -x $bench && -x $store ]] || { echo "$0: build first (tools/build.sh)" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)"
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
server_pid=""
trap '[[ -z $server_pid ]] || kill $server_pid 2>/dev/null || true' EXIT

start_server() {  # $1: ours|theirs, $2: port
  if [[ $1 == ours ]]; then
    "$store" --port "$2" --log-level error >/dev/null 2>&1 &
  else
    /usr/bin/python3 -c "
import datetime, time, torch.distributed as d
s = d.TCPStore('127.0.0.1', $2, 1, True, timeout=datetime.timedelta(seconds=600), wait_for_workers=False)
time.sleep(3600)" >/dev/null 2>&1 &
  fi
  server_pid=$!
  for _ in $(seq 100); do
    /usr/bin/python3 -c "import socket; socket.create_connection(('127.0.0.1', $2), 0.2)" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$0: the $1 server did not start" >&2
  return 1
}

cell() {  # $1: ours|theirs, $2: N -> "woken/N, errors, seconds"
  local port result
  port=$(free_port)
  start_server "$1" "$port"
  result=$("$bench" storm "$port" "$2" || true)
  kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null || true
  server_pid=""
  echo "$1 $2: $result" >&2
  /usr/bin/python3 -c "
import json, sys
r = json.loads(sys.argv[1])
err = (' (' + r['first_error'] + ')') if r['errors'] else ''
print('%d / %d | %d%s | %.2f' % (r['woken'], r['clients'], r['errors'], err, r['seconds']))" "$result"
}

table="| clients | ddprun-store woken | errors | s | PyTorch 1.13 TCPStore server woken | errors | s |
|---:|---:|---:|---:|---:|---:|---:|"
for n in $sizes; do
  table+=$'\n'"| $n | $(cell ours "$n") | $(cell theirs "$n") |"
done
section="### Connection storm: N clients ADD, then WAIT for the last one's key

One fresh server per cell; clients from one epoll loop (at most 1,024 connects in flight), open-file limit
$(ulimit -n), 2 vCPUs shared by server and clients. $(date -u +%Y-%m-%dT%H:%MZ), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown).

$table"
echo "$section"
[[ -n $out ]] && echo "$section" >"$out"
exit 0
