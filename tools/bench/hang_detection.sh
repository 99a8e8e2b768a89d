#!/usr/bin/env bash
# Hang detection, measured: a stock python3-torch DDP script (tests/scripts/progress_ddp.py, 2 ranks, Gloo,
# steps of 50 ms) whose rank 1 blocks at step 30 while rank 0 waits in the next allreduce.
#  - ddprun with --hang-timeout auto (default floor 5 s), RUNS times: detection latency (the moment rank 1 hung,
#    which it writes down, to the group stopped: ddprun's restart line), the time spent saving stacks (native and
#    Python), median and max;
#  - ddprun's peak RSS (VmHWM) with the status page on and polled 10 times a second during one run;
#  - torchrun 1.13 on the same script, capped at CAP seconds: it only sees exits, and Gloo's timeout is 30 min.
# Usage: tools/bench/hang_detection.sh   (env: RUNS=20, CAP=120)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
runs=${RUNS:-20}
cap=${CAP:-120}
ddprun=$root/build/bin/ddprun
script=$root/tests/scripts/progress_ddp.py
python=/usr/bin/python3
[[ -x $ddprun ]] || { echo "$0: build first (tools/build.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ms_of() { date -d "$1" +%s%3N; }  # "2026-12-01 07:49:13.652" -> Unix ms
stats() { sort -n | awk '{v[NR]=$1} END {printf "median %s, max %s (n=%d)", v[int((NR+1)/2)], v[NR], NR}'; }

: >"$tmp/latency"; : >"$tmp/native"; : >"$tmp/total_stacks"
for i in $(seq 1 "$runs"); do
  log=$tmp/run$i.log
  PYTHON_EXEC=$python "$ddprun" --nproc-per-node 2 --standalone --max-restarts 1 --log-dir "$tmp/logs$i" \
    "$script" --hang-rank 1 --hang-step 30 --steps 40 --mark-file "$tmp/mark$i" >"$log" 2>&1 || {
    echo "run $i failed:"; tail -20 "$log"; exit 1; }
  hung_ms=$(awk '{printf "%.0f", $1 * 1000}' "$tmp/mark$i")
  detected=$(grep -m1 "Hang: no progress" "$log" | sed -E 's/^\[([^]]+)\].*/\1/')
  stacks_done=$(grep -m1 "native stacks of" "$log" | sed -E 's/^\[([^]]+)\].*/\1/')
  restarted=$(grep -m1 "worker group failed; restart" "$log" | sed -E 's/^\[([^]]+)\].*/\1/')
  [[ -n $restarted ]] || { echo "run $i: no restart"; tail -20 "$log"; exit 1; }
  echo $(($(ms_of "$restarted") - hung_ms)) >>"$tmp/latency"
  echo $(($(ms_of "$stacks_done") - $(ms_of "$detected"))) >>"$tmp/native"
  echo $(($(ms_of "$restarted") - $(ms_of "$detected"))) >>"$tmp/total_stacks"
done
echo "ddprun, --hang-timeout auto (floor 5 s, steps of 50 ms), $runs runs:"
echo "  hung step -> group stopped:              $(stats <"$tmp/latency") ms"
echo "  native stacks of both ranks (eu-stack):  $(stats <"$tmp/native") ms"
echo "  detection -> group stopped (all stacks): $(stats <"$tmp/total_stacks") ms"

# Peak RSS of ddprun itself with the status page served and polled.
PYTHON_EXEC=$python "$ddprun" --nproc-per-node 2 --standalone --status-port 0 --log-dir "$tmp/rss" \
  "$script" --steps 200 --step-seconds 0.05 >"$tmp/rss.log" 2>&1 &
agent=$!
port=""
for _ in $(seq 1 200); do
  port=$(grep -oE 'status page on http://127\.0\.0\.1:[0-9]+' "$tmp/rss.log" | grep -oE '[0-9]+$' || true)
  [[ -n $port ]] && break
  sleep 0.05
done
peak=0
while kill -0 "$agent" 2>/dev/null; do
  for path in / /status.json /metrics; do curl -s -o /dev/null "http://127.0.0.1:$port$path" || true; done
  hwm=$(awk '/VmHWM/ {print $2}' "/proc/$agent/status" 2>/dev/null || echo 0)
  ((hwm > peak)) && peak=$hwm
  sleep 0.1
done
wait "$agent" || true
echo "ddprun's peak RSS with the status page on and polled: $((peak / 1024)).$(((peak % 1024) * 10 / 1024)) MiB"

# torchrun 1.13: the same hung script, capped.
start=$(date +%s)
set +e
timeout "$cap" $python -m torch.distributed.run --nproc_per_node 2 --master_port 29512 --max_restarts 1 \
  --monitor_interval 0.1 --redirects 1 --tee 1 "$script" --hang-rank 1 --hang-step 30 --steps 40 \
  >"$tmp/torchrun.log" 2>&1
rc=$?
set -e
pkill -f "progress_ddp.py --hang-rank 1" 2>/dev/null || true
if ((rc == 124)); then
  echo "torchrun 1.13: not detected within $cap s (rank 1 hung, rank 0 waiting; Gloo's default timeout is 30 min)"
else
  echo "torchrun 1.13: ended after $(($(date +%s) - start)) s with exit code $rc"
fi
