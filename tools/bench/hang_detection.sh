#!/usr/bin/env bash
# Hang detection, measured with stock python3-torch DDP scripts (tests/scripts/watch_patterns.py: 2 ranks, Gloo,
# steps of 50 ms, the step written to DDPRUN_PROGRESS_FILE as the README shows):
#  - detection latency, RUNS times each, for a rank that blocks in time.sleep at step 2 and at step 30 (the
#    moment it hung, which it writes down, to ddprun's hang line; and to the group stopped), median and max;
#  - latency of the report of a rank spinning in `while True: pass` at step 30 (a spin is reported, not acted on; the
#    runs end at a 90 s busy timeout) and of the hang line for a hang in step 0 before any report (one run each);
#  - false positives over healthy jobs that stop stepping for long: an unannounced 12 s evaluation, rank 0
#    evaluating 12 s (announced) while rank 1 waits in a barrier, a 10 s checkpoint, DataLoader workers burning 8 s
#    at each epoch's start, a 10 s warm-up after step 0, 16 allreduces of 200 MB, every rank sleep-polling 60 s for a
#    data shard, rank 0 computing 70 s unannounced (torch, then pure Python) while rank 1 waits in a barrier (goal: 0
#    flagged);
#  - ddprun's own CPU for the evidence (/proc and sock_diag samples of quiet ranks, their stacks) with 8 ranks in a
#    long unannounced evaluation: CPU seconds per second and per tick, --hang-timeout auto against off, and auto for
#    a script that never reports (sampled from its start);
#  - on a loaded machine (LOOPS_PER_CPU busy loops per CPU, default 2): 80 s of pure-Python computation (not a spin)
#    and a spin's report latency;
#  - ddprun's peak RSS with the status page on and polled 10 times a second;
#  - torchrun 1.13 on the step-30 hang, capped at CAP seconds: it only sees exits, and Gloo's timeout is 30 min.
# Usage: tools/bench/hang_detection.sh [--out FILE]   (env: RUNS=20, CAP=120, SECTIONS="latency healthy loaded cpu
# rss torchrun" to run only some, DDPRUN and ACTIVITY_BENCH for other builds' binaries, to compare two commits)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/tools/bench/out_arg.sh" "$@"
runs=${RUNS:-20}
cap=${CAP:-120}
ddprun=${DDPRUN:-$root/build/bin/ddprun}
activity_bench=${ACTIVITY_BENCH:-$root/build/bin/activity_bench}
script=$root/tests/scripts/watch_patterns.py
python=/usr/bin/python3
[[ -x $ddprun ]] || { echo "$0: build first (tools/build.sh)" >&2; exit 1; }
[[ -z $out ]] || exec > >(tee "$out")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT  # ddprun leaves no worker behind; never pkill by name (other jobs run these scripts)
ms_of() { date -d "$1" +%s%3N; }  # "2026-12-01 07:49:13.652" -> Unix ms
stats() { sort -n | awk '{v[NR]=$1} END {printf "median %s, max %s (n=%d)", v[int((NR+1)/2)], v[NR], NR}'; }
ddprun_job() { PYTHON_EXEC=$python "$ddprun" --nproc-per-node "${NPROC:-2}" --standalone --max-restarts 1 "$@"; }

sections=${SECTIONS:-latency healthy loaded cpu rss torchrun}
has() { [[ " $sections " == *" $1 "* ]]; }
echo "hang_detection.sh: commit $(git -C "$root" rev-parse --short HEAD), $(date -u +%FT%TZ), $(nproc) CPUs"
for at in 2 30; do
  has latency || continue
  : >"$tmp/detect$at"; : >"$tmp/stopped$at"
  for i in $(seq 1 "$runs"); do
    log=$tmp/hang$at-$i.log
    ddprun_job --log-dir "$tmp/logs" "$script" --pattern hang --rank 1 --step "$at" --epochs 1 --steps-per-epoch 40 \
      --mark-file "$tmp/mark" >"$log" 2>&1 || { echo "run $i failed:"; tail -20 "$log"; exit 1; }
    hung_ms=$(awk '{printf "%.0f", $1 * 1000}' "$tmp/mark")
    detected=$(grep -m1 "\] hang: " "$log" | sed -E 's/^\[([^]]+)\].*/\1/')
    restarted=$(grep -m1 "worker group failed; restart" "$log" | sed -E 's/^\[([^]]+)\].*/\1/')
    [[ -n $detected && -n $restarted ]] || { echo "hang at step $at, run $i: not detected"; tail -20 "$log"; exit 1; }
    echo $(($(ms_of "$detected") - hung_ms)) >>"$tmp/detect$at"
    echo $(($(ms_of "$restarted") - hung_ms)) >>"$tmp/stopped$at"
  done
  echo "ddprun, hang at step $at (--hang-timeout auto, floor 5 s, steps of 50 ms):"
  echo "  hung -> hang line:     $(stats <"$tmp/detect$at") ms"
  echo "  hung -> group stopped: $(stats <"$tmp/stopped$at") ms (stacks and Python tracebacks saved)"
done

# The time of the first line that says a rank hangs or spins.
verdict_time() { grep -m1 -E "\] hang: |spins in one place" "$1" | sed -E 's/^\[([^]]+)\].*/\1/'; }
if has latency; then
  for case in "spin --rank 1 --step 30" "hang --rank 1 --step 0 --report-after"; do
    name=${case%% *}
    log=$tmp/latency-$name.log
    # shellcheck disable=SC2086
    ddprun_job --hang-busy-timeout 90 --log-dir "$tmp/logs" "$script" --pattern $case --epochs 1 \
      --steps-per-epoch 40 --mark-file "$tmp/mark-$name" >"$log" 2>&1 || true
    detected=$(verdict_time "$log")
    if [[ -z $detected ]]; then echo "$name: not detected"; continue; fi
    hung_ms=$(awk '{printf "%.0f", $1 * 1000}' "$tmp/mark-$name")
    echo "ddprun, $case: hung -> hang line or spin report $(($(ms_of "$detected") - hung_ms)) ms"
  done
fi

if has healthy; then
flagged=0
for pattern in "eval --seconds 12" "rank0-eval --seconds 12" "checkpoint --seconds 10 --checkpoint-dir $tmp" \
               "dataloader --seconds 8" "warmup --seconds 10" "big-allreduce --mb 200 --count 16" \
               "idle-all --seconds 60 --checkpoint-dir $tmp" "rank0-compute --seconds 70" \
               "rank0-pycompute --seconds 70"; do
  name=${pattern%% *}
  log=$tmp/healthy-$name.log
  # shellcheck disable=SC2086
  ddprun_job --log-dir "$tmp/logs" "$script" --pattern $pattern --epochs 2 --steps-per-epoch 20 >"$log" 2>&1 || true
  if grep -q -E "\] hang: |spins in one place" "$log"; then
    flagged=$((flagged + 1))
    echo "  healthy $name: FLAGGED"
  else
    echo "  healthy $name: not flagged ($(grep -c "not a hang" "$log") look(s) at a working job)"
  fi
done
echo "false positives over the 9 healthy patterns: $flagged (goal 0)"
fi

# On a loaded machine (a busy loop per CPU): rank 0 computing 80 s in pure Python must not be taken for a spin; a
# spin must still be found.
if has loaded; then
  busy=()
  for _ in $(seq 1 $((${LOOPS_PER_CPU:-2} * $(nproc)))); do (while :; do :; done) & busy+=($!); done
  log=$tmp/loaded-pycompute.log
  ddprun_job --log-dir "$tmp/logs" "$script" --pattern rank0-pycompute --seconds 80 --epochs 1 --steps-per-epoch 5 \
    >"$log" 2>&1 || true
  if grep -q -E "\] hang: |spins in one place" "$log"; then echo "  loaded rank0-pycompute 80 s: FLAGGED"; else
    echo "  loaded rank0-pycompute 80 s: not flagged"; fi
  log=$tmp/loaded-spin.log
  ddprun_job --hang-busy-timeout 90 --log-dir "$tmp/logs" "$script" --pattern spin --rank 1 --step 30 --epochs 1 \
    --steps-per-epoch 40 --mark-file "$tmp/mark-loaded" >"$log" 2>&1 || true
  kill "${busy[@]}"
  detected=$(verdict_time "$log")
  if [[ -z $detected ]]; then echo "  loaded spin: not reported"; else
    echo "  loaded spin: spinning -> report $(($(ms_of "$detected") - $(awk '{printf "%.0f", $1 * 1000}' "$tmp/mark-loaded"))) ms"
  fi
fi

# ddprun's CPU with 8 quiet ranks (a 60 s evaluation nobody announced), hang detection on and off.
if has cpu; then
ticks_per_s=$(awk 'BEGIN {print 1 / 0.1}')
hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
all_at_step() {  # every one of the 8 ranks reported step $2 in run directory $1
  local n=0 f
  for f in "$1"/*/attempt_0/*/progress; do
    [[ -f $f && $(<"$f") == "$2" ]] && n=$((n + 1))
  done
  ((n == 8))
}
for mode in auto off unreported; do
  flag=$mode extra=""
  [[ $mode == unreported ]] && flag=auto extra=--no-report
  # shellcheck disable=SC2086
  PYTHON_EXEC=$python "$ddprun" --nproc-per-node 8 --standalone --hang-timeout "$flag" --log-dir "$tmp/cpu-$mode" \
    "$script" --pattern eval --seconds 60 --epochs 1 --steps-per-epoch 4 $extra >"$tmp/cpu-$mode.log" 2>&1 &
  agent=$!
  # Measure over 30 s of the evaluation: from 5 s after every rank reported its last step (step 3).
  for _ in $(seq 1 1200); do
    # Nothing reports without progress files: torch's import and the 4 steps are over well within 10 s.
    if [[ $mode == unreported ]]; then sleep 10; break; fi
    all_at_step "$tmp/cpu-$mode" 3 && break
    sleep 0.05
  done
  sleep 5
  before=$(cpu_ticks "$agent")
  if [[ $mode == auto && -x $activity_bench ]]; then
    # shellcheck disable=SC2046
    "$activity_bench" $(pgrep -f "python3 .*watch_patterns.py --pattern eval --seconds 60") >"$tmp/activity"
  fi
  sleep 30
  after=$(cpu_ticks "$agent")
  wait "$agent" || true
  awk -v a="$after" -v b="$before" -v hz="$hz" -v t="$ticks_per_s" -v m="$mode" \
    'BEGIN {cpu = (a - b) / hz / 30; printf "ddprun CPU with 8 quiet ranks, --hang-timeout %s: %.4f s per s (%.2f ms per 0.1 s tick)\n", m, cpu, cpu * 1000 / t}'
done
[[ ! -s $tmp/activity ]] || cat "$tmp/activity"
fi

# Peak RSS of ddprun itself with the status page served and polled.
if has rss; then
PYTHON_EXEC=$python "$ddprun" --nproc-per-node 2 --standalone --status-port 0 --log-dir "$tmp/rss" \
  "$script" --epochs 1 --steps-per-epoch 200 >"$tmp/rss.log" 2>&1 &
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
fi

# torchrun 1.13: the same hung script, capped.
if has torchrun; then
start=$(date +%s)
set +e
timeout "$cap" $python -m torch.distributed.run --nproc_per_node 2 --master_port 29512 --max_restarts 1 \
  --monitor_interval 0.1 --redirects 1 --tee 1 "$script" --pattern hang --rank 1 --step 30 --epochs 1 \
  --steps-per-epoch 40 --mark-file "$tmp/torchrun-mark" >"$tmp/torchrun.log" 2>&1
rc=$?
set -e
pkill -f "$tmp/torchrun-mark" 2>/dev/null || true  # torchrun's workers outlive its timeout; only this run's
if ((rc == 124)); then
  echo "torchrun 1.13: not detected within $cap s (rank 1 hung, rank 0 waiting; Gloo's default timeout is 30 min)"
else
  echo "torchrun 1.13: ended after $(($(date +%s) - start)) s with exit code $rc"
fi
fi
