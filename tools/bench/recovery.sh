#!/usr/bin/env bash
# Back to training after a failure: the 2-rank MLP on the carried MNIST sample with checkpoints every 10 steps;
# rank 1 is killed (SIGKILL) at step 35 of attempt 0; the group restarts, resumes from step 30 and trains.
#  - ddprun --start-method spawn and forkserver (the C++ worker, --backend auto = shm): failure seen (ddprun's
#    line "rank 1 … was killed") -> first training step of attempt 1 (the worker's line), and kill -> first
#    step (the worker logs the kill), from their log timestamps;
#  - torchrun 1.13 (--monitor_interval 0.1) with tools/bench/python_ddp.py (stock DDP, same model and data,
#    checkpoint every 10 steps): kill -> first step of attempt 1, from the wall times the script prints.
#  - ddprun --restart-scope rank (spawn and forkserver): only rank 1 is replaced; failure seen -> the first step
#    that every rank completed with the replacement (the later of the two ranks' "first training step of
#    generation 1" lines), and the steps computed twice (the fault's step minus the step training went on from,
#    plus the step in flight), and kill -> the survivor's collective fails (its "the group failed" line).
#  - a hang instead of a kill (rank 1 paused at step 35, Gloo, --hang-min-timeout 2): hang verdict (ddprun's
#    "hang:" line) -> first step with all ranks, whole group (resumes from step 30) vs rank 1 replaced alone.
# Median and max of REPEATS runs each. Usage: tools/bench/recovery.sh   (env: REPEATS=10; ROWS="...": only these of
# group_spawn group_forkserver rank_spawn rank_forkserver hang_group hang_rank torchrun, all by default)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
repeats=${REPEATS:-10}
rows=" ${ROWS:-group_spawn group_forkserver rank_spawn rank_forkserver hang_group hang_rank torchrun} "
want() { [[ $rows == *" $1 "* ]]; }
ddprun=${DDPRUN:-$root/build/bin/ddprun}  # DDPRUN: another build to compare
worker=$root/build/bin/worker
python=/usr/bin/python3
[[ -x $ddprun && -x $worker ]] || { echo "$0: build first (tools/build.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ms_of() { date -d "$1" +%s%3N; }
stamp() { grep -m1 "$2" "$1" | grep -oE '[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:.]+' | tail -1; }
stats() { sort -n | awk '{v[NR]=$1} END {printf "median %s ms, max %s ms (n=%d)", v[int((NR+1)/2)], v[NR], NR}'; }

ddprun_runs() {  # ddprun_runs START_METHOD
  : >"$tmp/seen_$1"; : >"$tmp/kill_$1"
  for i in $(seq 1 "$repeats"); do
    local log=$tmp/$1_$i.log ck=$tmp/ck_$1_$i
    "$ddprun" --nproc-per-node 2 --standalone --max-restarts 1 --start-method "$1" "$worker" \
      --data-dir "$root/data/mnist" --checkpoint-dir "$ck" --checkpoint-every 10 --epochs 1 \
      --fail-at-step 35 --fail-rank 1 --fail-attempt 0 --fail-mode kill >"$log" 2>&1 || {
      echo "run failed:"; tail -20 "$log"; exit 1; }
    local killed seen first
    killed=$(stamp "$log" "fault injection: SIGKILL")
    seen=$(stamp "$log" "rank 1 (pid [0-9]*) was killed")
    first=$(stamp "$log" "first training step of attempt 1")
    echo $(($(ms_of "$first") - $(ms_of "$seen"))) >>"$tmp/seen_$1"
    echo $(($(ms_of "$first") - $(ms_of "$killed"))) >>"$tmp/kill_$1"
  done
  echo "ddprun --start-method $1, C++ worker:"
  echo "  failure seen -> first step of attempt 1: $(stats <"$tmp/seen_$1")"
  echo "  kill -> first step of attempt 1:         $(stats <"$tmp/kill_$1")"
}

ddprun_replace_runs() {  # ddprun_replace_runs START_METHOD
  : >"$tmp/rseen_$1"; : >"$tmp/rkill_$1"; : >"$tmp/rtwice_$1"; : >"$tmp/rnotice_$1"
  for i in $(seq 1 "$repeats"); do
    local log=$tmp/r$1_$i.log ck=$tmp/rck_$1_$i
    "$ddprun" --nproc-per-node 2 --standalone --max-restarts 1 --restart-scope rank --start-method "$1" "$worker" \
      --data-dir "$root/data/mnist" --checkpoint-dir "$ck" --checkpoint-every 10 --epochs 1 \
      --fail-at-step 35 --fail-rank 1 --fail-attempt 0 --fail-mode kill >"$log" 2>&1 || {
      echo "run failed:"; tail -20 "$log"; exit 1; }
    grep -q "is replaced in place" "$log" || { echo "no replacement:"; tail -20 "$log"; exit 1; }
    local killed seen first0 first1 from
    killed=$(stamp "$log" "fault injection: SIGKILL")
    seen=$(stamp "$log" "rank 1 (pid [0-9]*) was killed")
    first0=$(ms_of "$(stamp "$log" "rank 0: first training step of generation 1")")
    first1=$(ms_of "$(stamp "$log" "rank 1: first training step of generation 1")")
    ((first1 > first0)) && first0=$first1
    echo $((first0 - $(ms_of "$seen"))) >>"$tmp/rseen_$1"
    echo $((first0 - $(ms_of "$killed"))) >>"$tmp/rkill_$1"
    echo $(($(ms_of "$(stamp "$log" "rank 0 (pid [0-9]*): the group failed")") - $(ms_of "$killed"))) >>"$tmp/rnotice_$1"
    from=$(grep -m1 -oE "training goes on from global step [0-9]+" "$log" | grep -oE "[0-9]+$")
    echo $((35 - from + 1)) >>"$tmp/rtwice_$1"
  done
  echo "ddprun --restart-scope rank --start-method $1, C++ worker:"
  echo "  failure seen -> first step with the replacement: $(stats <"$tmp/rseen_$1")"
  echo "  kill -> first step with the replacement:         $(stats <"$tmp/rkill_$1")"
  echo "  steps computed twice:                            $(stats <"$tmp/rtwice_$1" | sed 's/ ms//g')"
  echo "  kill -> rank 0's collective fails:               $(stats <"$tmp/rnotice_$1")"
}

ddprun_hang_runs() {  # ddprun_hang_runs SCOPE: rank 1 hangs at step 35; group restart or rank replacement
  : >"$tmp/hang_$1"
  for i in $(seq 1 "$repeats"); do
    local log=$tmp/hang_$1_$i.log ck=$tmp/hck_$1_$i first
    "$ddprun" --nproc-per-node 2 --standalone --max-restarts 1 --restart-scope "$1" --start-method forkserver \
      --hang-min-timeout 2 "$worker" --data-dir "$root/data/mnist" --backend gloo --checkpoint-dir "$ck" \
      --checkpoint-every 10 --epochs 1 --fail-at-step 35 --fail-rank 1 --fail-attempt 0 --fail-mode hang \
      >"$log" 2>&1 || { echo "run failed:"; tail -20 "$log"; exit 1; }
    if [[ $1 == rank ]]; then
      local first0 first1
      first0=$(ms_of "$(stamp "$log" "rank 0: first training step of generation 1")")
      first1=$(ms_of "$(stamp "$log" "rank 1: first training step of generation 1")")
      ((first1 > first0)) && first0=$first1
      first=$first0
    else
      first=$(ms_of "$(stamp "$log" "first training step of attempt 1")")
    fi
    echo $((first - $(ms_of "$(stamp "$log" "\[ddprun\] \[error\] hang:")"))) >>"$tmp/hang_$1"
  done
  echo "ddprun --restart-scope $1 --start-method forkserver, C++ worker (Gloo), rank 1 hung at step 35:"
  echo "  hang verdict -> first step with all ranks: $(stats <"$tmp/hang_$1")"
}

want group_spawn && ddprun_runs spawn
want group_forkserver && ddprun_runs forkserver
want rank_spawn && ddprun_replace_runs spawn
want rank_forkserver && ddprun_replace_runs forkserver
want hang_group && ddprun_hang_runs group
want hang_rank && ddprun_hang_runs rank
want torchrun || exit 0

: >"$tmp/torchrun"
for i in $(seq 1 "$repeats"); do
  log=$tmp/torchrun_$i.log
  $python -m torch.distributed.run --nproc_per_node 2 --master_port $((29600 + i)) --max_restarts 1 \
    --monitor_interval 0.1 --redirects 1 --tee 1 "$root/tools/bench/python_ddp.py" --dataset mnist \
    --data-dir "$root/data/mnist" --checkpoint "$tmp/py_$i.pt" --checkpoint-every 10 --fail-at-step 35 \
    --fail-rank 1 >"$log" 2>&1 || { echo "torchrun run failed:"; tail -20 "$log"; exit 1; }
  killed=$(grep -o '"type": "kill", "time": [0-9.]*' "$log" | grep -oE '[0-9.]+$' | head -1)
  first=$(grep -o '"type": "first_step", "attempt": 1, "time": [0-9.]*' "$log" | grep -oE '[0-9.]+$' | head -1)
  awk -v a="$killed" -v b="$first" 'BEGIN {printf "%.0f\n", (b - a) * 1000}' >>"$tmp/torchrun"
done
echo "torchrun 1.13, python_ddp.py:"
echo "  kill -> first step of attempt 1:         $(stats <"$tmp/torchrun")"
