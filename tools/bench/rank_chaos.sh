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
# NODES=2: 4 ranks as two nodes of 2 (two ddprun agents on loopback, c10d rendezvous; the reference is the same
# two nodes uninterrupted: across nodes the shm backend sums node by node), and a kill may hit any of the 4.
# Usage: tools/bench/rank_chaos.sh [--out FILE]
#   env: KILLS=100 EPOCHS=600 BACKEND=shm START_METHOD=forkserver NODES=1 SEED=1
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/tools/bench/out_arg.sh" "$@"
kills_wanted=${KILLS:-100}
epochs=${EPOCHS:-600}
backend=${BACKEND:-shm}
start_method=${START_METHOD:-forkserver}
nodes=${NODES:-1}
[[ $nodes == 1 || $nodes == 2 ]] || { echo "$0: NODES is 1 or 2, not '$nodes'" >&2; exit 2; }
RANDOM=${SEED:-1}
ddprun=$root/build/bin/ddprun
worker=$root/build/bin/worker
[[ -x $ddprun && -x $worker ]] || { echo "$0: build first (tools/build.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
export TMPDIR=$tmp OMP_NUM_THREADS=1
ulimit -c 0  # SIGSEGV: no core files
agents=()
cleanup() {
  ((${#agents[@]} > 0)) && kill -9 "${agents[@]}" 2>/dev/null
  [[ -f $tmp/chaos0.log ]] && cat "$tmp"/chaos*.log >"${TMPDIR_KEEP:-/tmp}/rank_chaos_last.log"
  pkill -KILL -f "$tmp/" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
train=("$worker" --data-dir "$root/data/mnist" --backend "$backend" --epochs "$epochs" --checkpoint-every 50
  --log-every 100000)

# Starts the job's agents (one, or two nodes) with `extra` flags, checkpoints in `dir`, logs in $tmp/<name><i>.log.
start_agents() {  # start_agents NAME DIR [FLAG...]
  local name=$1 dir=$2 i port
  shift 2
  if ((nodes == 1)); then
    "$ddprun" --nproc-per-node 2 --standalone --start-method "$start_method" "$@" "${train[@]}" \
      --checkpoint-dir "$dir" >"$tmp/${name}0.log" 2>&1 &
    agents+=($!)
    return
  fi
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for i in 0 1; do
    "$ddprun" --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" \
      --rdzv-id "$name-$$" --local-addr "127.0.0.$((i + 1))" --rdzv-conf "last_call_timeout=1,join_timeout=120" \
      --start-method "$start_method" "$@" "${train[@]}" --checkpoint-dir "$dir" >"$tmp/$name$i.log" 2>&1 &
    agents+=($!)
  done
}
# Waits for every agent started; returns the last non-zero exit code (0 when all succeeded).
wait_agents() {
  local a rc=0
  for a in "${agents[@]}"; do wait "$a" || rc=$?; done
  agents=()
  return "$rc"
}

echo "== uninterrupted run ($backend, $epochs epochs, $nodes node(s))"
start_agents whole "$tmp/whole"
wait_agents || { echo "the uninterrupted run failed:"; tail -20 "$tmp"/whole*.log; exit 1; }

# The ranks: every agent's children named "worker", but its forkserver template and a spare rank not claimed yet.
ranks() {
  local i template spares
  for i in "${!agents[@]}"; do
    template=$({ grep -m1 -oE "template ready \(pid [0-9]+\)" "$tmp/chaos$i.log" || true; } | grep -oE "[0-9]+" || true)
    spares=$({ grep -oE "spare rank forked \(pid [0-9]+\)" "$tmp/chaos$i.log" || true; } | grep -oE "[0-9]+" | sort)
    spares=$(comm -23 <(echo "$spares") <({ grep -oE "replaced by pid [0-9]+ \(the spare" "$tmp/chaos$i.log" || true; } |
      grep -oE "[0-9]+" | sort) | tr '\n' ' ')
    ps -o pid=,comm= --ppid "${agents[$i]}" 2>/dev/null |
      awk -v t="${template:-0}" -v s=" $spares" '$2 == "worker" && $1 != t && index(s, " " $1 " ") == 0 {print $1}'
  done
}
count() { cat "$tmp"/chaos*.log | grep -c "$@" || true; }  # matching lines in every agent's log
running() { local a; for a in "${agents[@]}"; do kill -0 "$a" 2>/dev/null && return 0; done; return 1; }
# Waits (at most 60 s) until the log has more than `before` lines matching either outcome of a kill.
settled() {
  local before=$1
  for _ in $(seq 600); do
    (($(count -e "communicator generation [0-9]* formed" -e "restarted 2 workers") > before)) && return 0
    running || return 0
    sleep 0.1
  done
  return 1
}

echo "== chaos run: up to $kills_wanted kills, $nodes node(s)"
export DDPRUN_LOG_LEVEL=debug  # the launch token (the shared-memory check at the end)
start_agents chaos "$tmp/chaos" --restart-scope rank --max-restarts 100000
signals=(KILL TERM SEGV)
kills=0 pid_changed=0 waited=0
ranks_total=$((nodes == 2 ? 4 : 2))
while ((kills < kills_wanted)) && running; do
  mapfile -t pids < <(ranks)
  if ((${#pids[@]} < ranks_total)); then sleep 0.05; continue; fi
  victim=${pids[$((RANDOM % ranks_total))]}
  others=()
  for p in "${pids[@]}"; do [[ $p == "$victim" ]] || others+=("$p"); done
  before=$(count -e "communicator generation [0-9]* formed" -e "restarted 2 workers")
  replaced_before=$(count "is replaced in place")
  restarts_before=$(count "restarted 2 workers")
  kill -"${signals[$((RANDOM % 3))]}" "$victim" 2>/dev/null || continue
  kills=$((kills + 1))
  if ((RANDOM % 10 == 0)); then continue; fi  # the next kill at once: maybe during the replacement
  settled "$before" || { echo "no replacement or restart within 60 s after kill $kills"; tail -20 "$tmp"/chaos*.log; exit 1; }
  waited=$((waited + 1))
  # Replaced in place (and no group restart since): the other rank must be the same process.
  if (($(count "is replaced in place") > replaced_before)) && (($(count "restarted 2 workers") == restarts_before)); then
    for p in "${others[@]}"; do
      kill -0 "$p" 2>/dev/null || { pid_changed=$((pid_changed + 1)); break; }
    done
  fi
  sleep "0.$((2 + RANDOM % 9))"
done
rc=0
wait_agents || rc=$?
replacements=$(count "is replaced in place")
restarts=$(grep -c "restarted 2 workers" "$tmp/chaos0.log" || true)  # a restart of several nodes is in every log
reasons=$({ cat "$tmp"/chaos*.log | grep -oE "instead of replacing rank [0-9]+: .*" || true; } |
  sed -E 's/instead of replacing rank [0-9]+: //' | sort | uniq -c | awk '{c=$1; $1=""; printf "%s%d ×%s", sep, c, $0; sep="; "}')
shm_left=0
for token in $({ cat "$tmp"/chaos*.log | grep -oE "launch token [0-9a-f]+" || true; } | awk '{print $3}'); do
  shm_left=$((shm_left + $({ ls /dev/shm 2>/dev/null || true; } | { grep -c "$token" || true; })))
done
procs_left=$({ pgrep -f "$tmp/" || true; } | wc -l)
final_whole=$(cd "$tmp/whole" && ls checkpoint-*.pt | sort | tail -1)
final_chaos=$(cd "$tmp/chaos" && ls checkpoint-*.pt | sort | tail -1)
stray=$(ls "$tmp/chaos" | grep -vc '^checkpoint-[0-9]*\.pt$' || true)
equal=$({ /usr/bin/python3 "$root/tools/bench/checkpoint_equal.py" "$tmp/whole/$final_whole" "$tmp/chaos/$final_chaos" 2>&1 ||
  true; } | tail -1)
row="| $backend, $start_method, $nodes node(s) | $kills kills | ddprun exit $rc | $replacements replaced in place, $restarts whole-group restarts${reasons:+ ($reasons)} | survivor pid changed after $pid_changed of $waited settled replacements | final checkpoint ($final_chaos): $equal; other files in the checkpoint dir: $stray | /dev/shm left: $shm_left, processes left: $procs_left |"
echo "$row"
[[ -n $out ]] && echo "$row" >>"$out"
((rc == 0)) || { echo "ddprun failed:"; tail -30 "$tmp"/chaos*.log; exit 1; }
exit 0
