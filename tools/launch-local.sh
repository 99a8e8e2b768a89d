#!/usr/bin/env bash
# Starts N local ranks of a program with torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT, …) and nothing more: the plain launcher the benchmarks use to start the C++
# worker and the Python anchor the same way. Use ddprun for real runs. If any rank fails, the others are
# stopped (SIGTERM, then SIGKILL after 5 s) and the first failing exit code is returned. Usage: tools/launch-local.sh N program [args…]
set -uo pipefail
if (($# < 2)) || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 NPROC program [args...]" >&2
  exit 2
fi
nproc=$1
shift
port=${MASTER_PORT:-$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
export MASTER_ADDR=${MASTER_ADDR:-127.0.0.1} MASTER_PORT=$port WORLD_SIZE=$nproc LOCAL_WORLD_SIZE=$nproc
export TORCHELASTIC_RESTART_COUNT=${TORCHELASTIC_RESTART_COUNT:-0} TORCHELASTIC_USE_AGENT_STORE=False
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

pids=()
stop_all() {
  kill -TERM "${pids[@]}" 2>/dev/null
  for _ in $(seq 50); do kill -0 "${pids[@]}" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "${pids[@]}" 2>/dev/null
}
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM
trap 'stop_all; exit 129' HUP

for ((r = 0; r < nproc; r++)); do
  RANK=$r LOCAL_RANK=$r GROUP_RANK=0 "$@" &
  pids+=($!)
done

status=0
remaining=$nproc
while ((remaining > 0)); do
  wait -n
  rc=$?
  remaining=$((remaining - 1))
  if ((rc != 0 && status == 0)); then
    status=$rc
    stop_all
  fi
done
exit $status
