#!/usr/bin/env bash
# A chaos run of rank kills under --restart-scope rank: a 2-rank job of the C++ worker (BACKEND shm or gloo,
# START_METHOD forkserver or spawn; the carried MNIST sample, EPOCHS epochs, checkpoints every 50 steps). Until
# KILLS ranks were killed or the job ended: a random rank gets SIGKILL, SIGTERM or SIGSEGV (random), then, once
# ddprun has replaced it (or restarted the group), a pause of 0.2-1.0 s; one kill in ten comes at once instead,
# while the last replacement may still be forming (the fallback's case). The same job runs once uninterrupted first.
# Reports: kills; replacements and whole-group restarts (the fallback, with ddprun's reasons); kills after which
# the other rank's pid changed although its rank was replaced in place (expected 0); whether the final checkpoint is
# bit-identical to the uninterrupted run's (tools/bench/checkpoint_equal.py, stock PyTorch); shared-memory segments
# and worker processes left behind (expected none).
# Usage: tools/bench/rank_chaos.sh [--out FILE]   (env: KILLS=100 EPOCHS=600 BACKEND=shm START_METHOD=forkserver SEED=1)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/tools/bench/out_arg.sh" "$@"
kills_wanted=${KILLS:-100}
epochs=${EPOCHS:-600}
backend=${BACKEND:-shm}
start_method=${START_METHOD:-forkserver}
RANDOM=${SEED:-1}
ddprun=$root/build/bin/ddprun
worker=$root/build/bin/worker
[[ -x $ddprun && -x $worker ]] || { echo "$0: build first (tools/build.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
export TMPDIR=$tmp OMP_NUM_THREADS=1
ulimit -c 0  # SIGSEGV: no core files
ddprun_pid=""
cleanup() {
  [[ -n $ddprun_pid ]] && kill -9 "$ddprun_pid" 2>/dev/null
  [[ -f $tmp/chaos.log ]] && cp "$tmp/chaos.log" "${TMPDIR_KEEP:-/tmp}/rank_chaos_last.log"
  pkill -KILL -f "$tmp/" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
job=(--nproc-per-node 2 --standalone --start-method "$start_method")
train=("$worker" --data-dir "$root/data/mnist" --backend "$backend" --epochs "$epochs" --checkpoint-every 50
  --log-every 100000)

echo "== uninterrupted run ($backend, $epochs epochs)"
"$ddprun" "${job[@]}" "${train[@]}" --checkpoint-dir "$tmp/whole" >"$tmp/whole.log" 2>&1 || {
  echo "the uninterrupted run failed:"; tail -20 "$tmp/whole.log"; exit 1; }

# The ranks: ddprun's children named "worker", but the forkserver template.
ranks() {
  local template
  template=$(grep -m1 -oE "template ready \(pid [0-9]+\)" "$tmp/chaos.log" | grep -oE "[0-9]+" || true)
  ps -o pid=,comm= --ppid "$ddprun_pid" 2>/dev/null | awk -v t="${template:-0}" '$2 == "worker" && $1 != t {print $1}'
}
# Waits (at most 60 s) until the log has more than `before` lines matching either outcome of a kill.
settled() {
  local before=$1
  for _ in $(seq 600); do
    (($(grep -c -e "communicator generation [0-9]* formed" -e "restarted 2 workers" "$tmp/chaos.log") > before)) && return 0
    kill -0 "$ddprun_pid" 2>/dev/null || return 0
    sleep 0.1
  done
  return 1
}

echo "== chaos run: up to $kills_wanted kills"
DDPRUN_LOG_LEVEL=debug "$ddprun" "${job[@]}" --restart-scope rank --max-restarts 100000 "${train[@]}" \
  --checkpoint-dir "$tmp/chaos" >"$tmp/chaos.log" 2>&1 &
ddprun_pid=$!
signals=(KILL TERM SEGV)
kills=0 pid_changed=0 waited=0
while ((kills < kills_wanted)) && kill -0 "$ddprun_pid" 2>/dev/null; do
  mapfile -t pids < <(ranks)
  if ((${#pids[@]} < 2)); then sleep 0.05; continue; fi
  victim=${pids[$((RANDOM % 2))]}
  other=${pids[0]}
  [[ $other == "$victim" ]] && other=${pids[1]}
  before=$(grep -c -e "communicator generation [0-9]* formed" -e "restarted 2 workers" "$tmp/chaos.log" || true)
  replaced_before=$(grep -c "is replaced in place" "$tmp/chaos.log" || true)
  restarts_before=$(grep -c "restarted 2 workers" "$tmp/chaos.log" || true)
  kill -"${signals[$((RANDOM % 3))]}" "$victim" 2>/dev/null || continue
  kills=$((kills + 1))
  if ((RANDOM % 10 == 0)); then continue; fi  # the next kill at once: maybe during the replacement
  settled "$before" || { echo "no replacement or restart within 60 s after kill $kills"; tail -20 "$tmp/chaos.log"; exit 1; }
  waited=$((waited + 1))
  # Replaced in place (and no group restart since): the other rank must be the same process.
  if (($(grep -c "is replaced in place" "$tmp/chaos.log") > replaced_before)) &&
    (($(grep -c "restarted 2 workers" "$tmp/chaos.log") == restarts_before)); then
    kill -0 "$other" 2>/dev/null || pid_changed=$((pid_changed + 1))
  fi
  sleep "0.$((2 + RANDOM % 9))"
done
set +e
wait "$ddprun_pid"
rc=$?
set -e
ddprun_pid=""
replacements=$(grep -c "is replaced in place" "$tmp/chaos.log" || true)
restarts=$(grep -c "restarted 2 workers" "$tmp/chaos.log" || true)
reasons=$({ grep -oE "instead of replacing rank [0-9]+: .*" "$tmp/chaos.log" || true; } |
  sed -E 's/instead of replacing rank [0-9]+: //' | sort | uniq -c | awk '{c=$1; $1=""; printf "%s%d ×%s", sep, c, $0; sep="; "}')
token=$({ grep -m1 -oE "launch token [0-9a-f]+" "$tmp/chaos.log" || true; } | awk '{print $3}')
shm_left=$({ ls /dev/shm 2>/dev/null || true; } | { grep -c "${token:-no-token}" || true; })
procs_left=$({ pgrep -f "$tmp/" || true; } | wc -l)
final_whole=$(ls "$tmp/whole" | sort | tail -1)
final_chaos=$(ls "$tmp/chaos" | sort | tail -1)
equal=$(/usr/bin/python3 "$root/tools/bench/checkpoint_equal.py" "$tmp/whole/$final_whole" "$tmp/chaos/$final_chaos" 2>&1 |
  tail -1)
row="| $backend, $start_method | $kills kills | ddprun exit $rc | $replacements replaced in place, $restarts whole-group restarts${reasons:+ ($reasons)} | survivor pid changed after $pid_changed of $waited settled replacements | final checkpoint: $equal | /dev/shm left: $shm_left, processes left: $procs_left |"
echo "$row"
[[ -n $out ]] && echo "$row" >>"$out"
((rc == 0)) || { echo "ddprun failed:"; tail -30 "$tmp/chaos.log"; exit 1; }
exit 0
