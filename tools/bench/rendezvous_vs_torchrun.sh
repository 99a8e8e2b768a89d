#!/usr/bin/env bash
# Multi-node rendezvous at scale: for each count in NODES, that many ddprun agents, and torchrun 1.13 agents
# (python3 -m torch.distributed.run) at TORCHRUN_NODES, side by side in one run, all on this machine's
# loopback, each agent one node of a --nnodes N job with c10d rendezvous and one trivial worker (`true`,
# --no-python). Node i advertises its own loopback address 127.0.<(i-1)/250>.<(i-1)%250+1> (all of
# 127.0.0.0/8 routes to lo, so there is no cap at 250); only node 1 (127.0.0.1) serves the rendezvous store.
# All agents are started at once by tools/bench/spawn_nodes.py (posix_spawn), as a scheduler starts one per machine.
# Measured: wall time from starting the first agent to the exit of the last (start-up + rendezvous + run +
# shutdown), median of REPEATS, and for ddprun the slowest node's own "rendezvous round 0 complete in X ms".
# torchrun 1.13 needs --redirects/--tee set, or its log setup crashes.
# BACKEND=etcd-v3: the same against a private etcd on loopback (Debian's etcd-server; no node serves a store).
# torchrun is then not run: its etcd backends need python-etcd (v2 API), which Debian does not package.
# Usage: tools/bench/rendezvous_vs_torchrun.sh [--out FILE]
#   env: NODES="64 256 1024" REPEATS=3 TORCHRUN_NODES=64 (0: no torchrun) TORCHRUN_REPEATS=1 BACKEND=c10d SCRATCH=/dev/shm
#   DDPRUN=<binary>: another build (its ddprun-orphan-guard beside it), e.g. two builds run alternately for an A/B
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/tools/bench/out_arg.sh" "$@"
counts=${NODES:-64}
repeats=${REPEATS:-3}
torchrun_nodes=${TORCHRUN_NODES:-64}
torchrun_repeats=${TORCHRUN_REPEATS:-1}
backend=${BACKEND:-c10d}
[[ $backend == c10d || $backend == etcd-v3 ]] || { echo "$0: BACKEND is c10d or etcd-v3, not '$backend'" >&2; exit 2; }
[[ $backend == etcd-v3 ]] && torchrun_nodes=0
ddprun=${DDPRUN:-$root/build/bin/ddprun}
[[ -x $ddprun ]] || { echo "$0: build first (tools/build.sh)" >&2; exit 1; }
# The agents' run reports (ddprun_*/) and logs go here and away with it: on a tmpfs (SCRATCH, default /dev/shm), as
# rendezvous_timeline.sh says why (here 1,024 agents share one directory; on a cluster each has its own /tmp).
tmp=$(mktemp -d -p "${SCRATCH:-/dev/shm}")
export TMPDIR=$tmp
trap 'pkill -KILL -f "rdzv.id.bench-$$" 2>/dev/null || true; rm -rf "$tmp"' EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# One agent per node needs file descriptors: the store's host holds a connection per node.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# etcd-v3: one private etcd for the whole run (each job has its own --rdzv-id), ready when it answers.
etcd_endpoint=""
if [[ $backend == etcd-v3 ]]; then
  etcd_port=$(free_port)
  etcd --name bench --data-dir "$tmp/etcd" --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" --listen-peer-urls "http://127.0.0.1:$(free_port)" \
    >"$tmp/etcd.log" 2>&1 &
  etcd_pid=$!
  trap 'kill "$etcd_pid" 2>/dev/null; pkill -KILL -f "rdzv.id.bench-$$" 2>/dev/null || true; rm -rf "$tmp"' EXIT
  etcd_endpoint=127.0.0.1:$etcd_port
  for _ in $(seq 100); do
    ETCDCTL_API=3 etcdctl --endpoints "$etcd_endpoint" endpoint health >/dev/null 2>&1 && break
    sleep 0.1
  done
fi

# Starts `nodes` agents of one job at once (spawn_nodes.py), waits for all; prints the wall time in ms. Fails if any
# agent fails.
run_job() {  # run_job ddprun|torchrun nodes round
  local which=$1 nodes=$2 round=$3 port cmd result
  port=$(free_port)
  if [[ $which == ddprun ]]; then
    cmd=("$ddprun" --nnodes "$nodes" --nproc-per-node 1 --rdzv-backend "$backend"
      --rdzv-endpoint "${etcd_endpoint:-127.0.0.1:$port}" --rdzv-id "bench-$$-$nodes-$round" --local-addr "{addr}"
      --no-python true)
  else
    cmd=(/usr/bin/python3 -m torch.distributed.run --nnodes "$nodes" --nproc_per_node 1 --rdzv_backend c10d
      --rdzv_endpoint "127.0.0.1:$port" --rdzv_id "bench-$$-$nodes-$round" --monitor_interval 0.1 --redirects 1
      --tee 1 --no_python true)
  fi
  result=$(/usr/bin/python3 "$root/tools/bench/spawn_nodes.py" "$nodes" "$tmp/$which-$nodes-$round-{i}.log" "${cmd[@]}")
  local wall failed
  read -r wall failed _ <<<"$result"  # spawn_nodes.py: ms, agents failed, their CPU ms
  if ((failed > 0)); then
    echo "$0: $failed $which node(s) failed; the log of one:" >&2
    grep -l -i "error" "$tmp/$which-$nodes-$round-"*.log | head -1 | xargs tail -5 >&2
    # The last line of the first failure, for the table (torchrun 1.13 has timed out here at 64 nodes).
    echo "failed after $wall ms: $(grep -h -i "error" "$tmp/$which-$nodes-$round-"*.log | tail -1 | cut -c1-120)"
    return 0
  fi
  echo "$wall"
}

# The slowest ddprun node's own rendezvous time in a job (from its log line).
ddprun_rendezvous_ms() {
  grep -ho "round 0 complete in [0-9]* ms" "$tmp/ddprun-$1-$2-"*.log | awk '{print $5}' | sort -n | tail -1
}

emit() {
  echo "$1"
  [[ -n $out ]] && echo "$1" >>"$out"
  return 0
}

echo "== $backend rendezvous on loopback, trivial worker, $(nproc) CPUs; nodes: $counts (torchrun at $torchrun_nodes)"
for nodes in $counts; do
  wall=() rdzv=()
  for ((r = 0; r < repeats; r++)); do
    wall+=("$(run_job ddprun "$nodes" "$r")")
    rdzv+=("$(ddprun_rendezvous_ms "$nodes" "$r")")
    echo "ddprun   $nodes nodes, run $r: ${wall[-1]} ms wall, slowest node's rendezvous ${rdzv[-1]} ms"
  done
  dw=$(printf '%s\n' "${wall[@]}" | median)
  dr=$(printf '%s\n' "${rdzv[@]}" | median)
  row="| $nodes | $backend | ddprun: start → all exited $dw ms | slowest node's rendezvous $dr ms |"
  if ((nodes == torchrun_nodes)); then
    torch_wall=()
    for ((r = 0; r < torchrun_repeats; r++)); do
      torch_wall+=("$(run_job torchrun "$nodes" "$r")")
      echo "torchrun $nodes nodes, run $r: ${torch_wall[-1]} ms wall"
    done
    if [[ ${torch_wall[0]} == failed* ]]; then
      row="$row torchrun 1.13: ${torch_wall[0]} |"
    else
      tw=$(printf '%s\n' "${torch_wall[@]}" | median)
      row="$row torchrun 1.13: $tw ms ($(awk -v t="$tw" -v d="$dw" 'BEGIN {printf "%.1f", t / d}')× ddprun's time) |"
    fi
  fi
  emit "$row"
done
exit 0
