#!/usr/bin/env bash
# Launcher costs: ddprun vs torchrun 1.13 (python3 -m torch.distributed.run, --monitor_interval 0.1), side by
# side: launch overhead of 2 trivial workers (wall time of a whole run of `true`), restart latency (the
# failing worker's exit -> the last worker of the new attempt started, from timestamps the workers write),
# and the agent's peak RSS (VmHWM of the launcher process itself, workers excluded). Median of REPEATS.
# A third column runs ddprun with its status page on (--status-port) while a client polls /, /status.json
# and /metrics ten times a second: supervision must not slow down with the page open.
# Usage: tools/bench/launcher_vs_torchrun.sh [--out FILE]   (env: REPEATS=5)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=""
[[ ${1:-} == --out ]] && out=$2
repeats=${REPEATS:-5}
ddprun=${DDPRUN:-$root/build/bin/ddprun}  # DDPRUN: another build to compare
[[ -x $ddprun ]] || { echo "$0: build first (tools/build.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
now_ns() { date +%s%N; }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# Both launchers get the same worker protocol: --no-python binaries, 2 per node, logs to the console.
# Always called in a subshell, which exec turns into the launcher itself (so $! is the agent's pid).
launch() {  # launch ddprun|torchrun args...
  local which=$1; shift
  if [[ $which == ddprun ]]; then
    exec "$ddprun" --nproc-per-node 2 --standalone --monitor-interval 0.1 "$@"
  elif [[ $which == ddprun-status ]]; then
    exec "$ddprun" --nproc-per-node 2 --standalone --monitor-interval 0.1 --status-port "$STATUS_PORT" "$@"
  else
    exec /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 --master_port "$(free_port)" \
      --monitor_interval 0.1 --redirects 1 --tee 1 --no_python "$@"
  fi
}

# 1. Launch overhead: the whole run of two `true` workers.
launch_ms() {
  local start end
  start=$(now_ns)
  (launch "$1" true >/dev/null 2>&1)
  end=$(now_ns)
  echo $(((end - start) / 1000000))
}

# 2. Restart latency: rank 1 fails at once on attempt 0; every worker logs its start time.
cat >"$tmp/worker.sh" <<'W'
#!/bin/sh
echo "$TORCHELASTIC_RESTART_COUNT $(date +%s%N)" >> "$BENCH_DIR/start.$RANK"
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  if [ "$RANK" = 1 ]; then date +%s%N > "$BENCH_DIR/fail"; exit 1; fi
  exec sleep 30
fi
W
chmod +x "$tmp/worker.sh"
restart_ms() {
  local dir=$tmp/r-$1-$RANDOM
  mkdir -p "$dir"
  (BENCH_DIR=$dir launch "$1" --max_restarts 1 "$tmp/worker.sh" >/dev/null 2>&1) || true
  local fail last
  fail=$(cat "$dir/fail")
  last=$(cat "$dir"/start.* | awk '$1 == 1 {print $2}' | sort -n | tail -1)
  echo $(((last - fail) / 1000000))
}

# 3. Agent peak RSS: VmHWM of the launcher process while 2 workers sleep.
rss_kib() {
  (launch "$1" sleep 3 >/dev/null 2>&1) &
  local pid=$! hwm
  sleep 2
  hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  wait $pid || true
  echo "$hwm"
}

# Polls the status page 10 times a second (all three endpoints) until killed; connection errors (between
# runs, no page) are ignored.
poll_status() {
  while :; do
    for path in / /status.json /metrics; do curl -s -m 0.5 -o /dev/null "http://127.0.0.1:$STATUS_PORT$path" || true; done
    sleep 0.1
  done
}
STATUS_PORT=$(free_port)
poll_status &
poller=$!
trap 'kill $poller 2>/dev/null; rm -rf "$tmp"' EXIT

declare -A res
for metric in launch_ms restart_ms rss_kib; do
  for which in ddprun ddprun-status torchrun; do
    vals=()
    for ((i = 0; i < repeats; i++)); do vals+=("$($metric $which)"); done
    res[$metric.$which]=$(printf '%s\n' "${vals[@]}" | median)
    echo "$metric $which: ${vals[*]}" >&2
  done
done
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f×", b / a}'; }
section="### Launcher: ddprun vs torchrun 1.13

Median of $repeats runs each on the 2-vCPU development machine; torchrun is
\`python3 -m torch.distributed.run --monitor_interval 0.1 --redirects 1 --tee 1 --no_python\` (python3-torch
1.13), ddprun is \`ddprun --standalone --monitor-interval 0.1\`. $(date -u +%Y-%m-%dT%H:%MZ), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown).

| measure | ddprun | ddprun, status page polled 10×/s | torchrun 1.13 | torchrun / ddprun |
|---|---:|---:|---:|---:|
| launch of 2 trivial workers, whole run (ms) | ${res[launch_ms.ddprun]} | ${res[launch_ms.ddprun-status]} | ${res[launch_ms.torchrun]} | $(ratio "${res[launch_ms.ddprun]}" "${res[launch_ms.torchrun]}") |
| restart latency: failing exit → all new workers started (ms) | ${res[restart_ms.ddprun]} | ${res[restart_ms.ddprun-status]} | ${res[restart_ms.torchrun]} | $(ratio "${res[restart_ms.ddprun]}" "${res[restart_ms.torchrun]}") |
| agent peak RSS (MiB) | $(mib "${res[rss_kib.ddprun]}") | $(mib "${res[rss_kib.ddprun-status]}") | $(mib "${res[rss_kib.torchrun]}") | $(ratio "${res[rss_kib.ddprun]}" "${res[rss_kib.torchrun]}") |"
echo "$section"
[[ -n $out ]] && echo "$section" >"$out"
exit 0
