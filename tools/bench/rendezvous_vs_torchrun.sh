#!/usr/bin/env bash
# Multi-node rendezvous at scale: NODES ddprun agents vs NODES torchrun 1.13 agents (python3 -m
# torch.distributed.run), side by side in one run, all on this machine's loopback, each agent one node of a
# --nnodes NODES job with c10d rendezvous and one trivial worker (`true`, --no-python). Measured: wall time
# from starting the first agent to the exit of the last (start-up + rendezvous + run + shutdown), median of
# REPEATS (torchrun 1.13 needs --redirects/--tee set, or its log setup crashes); for ddprun also the slowest node's own "rendezvous round 0 complete in X ms".
# Usage: tools/bench/rendezvous_vs_torchrun.sh [--out FILE]   (env: NODES=64 REPEATS=3 TORCHRUN_REPEATS=1)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=""
[[ ${1:-} == --out ]] && out=$2
nodes=${NODES:-64}
repeats=${REPEATS:-3}
torchrun_repeats=${TORCHRUN_REPEATS:-1}
ddprun=$root/build/bin/ddprun
[[ -x $ddprun ]] || { echo "$0: build first (tools/build.sh)" >&2; exit 1; }
((nodes <= 250)) || { echo "$0: at most 250 nodes (one 127.0.0.x address each)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'pkill -KILL -f "rdzv.id.bench-$$" 2>/dev/null || true; rm -rf "$tmp"' EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
now_ns() { date +%s%N; }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# Starts NODES agents of one job, waits for all; prints the wall time in ms. Fails if any agent fails.
run_job() {  # run_job ddprun|torchrun round
  local which=$1 round=$2 port start end failed=0
  port=$(free_port)
  local pids=()
  start=$(now_ns)
  for ((i = 1; i <= nodes; i++)); do
    if [[ $which == ddprun ]]; then
      # Distinct --local-addr per node: only 127.0.0.1 serves the rendezvous store.
      "$ddprun" --nnodes "$nodes" --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" \
        --rdzv-id "bench-$$-$round" --local-addr "127.0.0.$i" --no-python true >"$tmp/$which-$round-$i.log" 2>&1 &
    else
      /usr/bin/python3 -m torch.distributed.run --nnodes "$nodes" --nproc_per_node 1 --rdzv_backend c10d \
        --rdzv_endpoint "127.0.0.1:$port" --rdzv_id "bench-$$-$round" --monitor_interval 0.1 --redirects 1 --tee 1 --no_python true \
        >"$tmp/$which-$round-$i.log" 2>&1 &
    fi
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  end=$(now_ns)
  if ((failed)); then
    echo "$0: a $which node failed; its log:" >&2
    grep -l -i "error" "$tmp/$which-$round-"*.log | head -1 | xargs tail -20 >&2
    exit 1
  fi
  echo $(((end - start) / 1000000))
}

# The slowest ddprun node's own rendezvous time in a job (from its log line).
ddprun_rendezvous_ms() {
  grep -ho "round 0 complete in [0-9]* ms" "$tmp/ddprun-$1-"*.log | awk '{print $5}' | sort -n | tail -1
}

echo "== $nodes nodes, c10d rendezvous on loopback, trivial worker; $(nproc) CPUs"
ddprun_wall=() ddprun_rdzv=()
for ((r = 0; r < repeats; r++)); do
  ddprun_wall+=("$(run_job ddprun "$r")")
  ddprun_rdzv+=("$(ddprun_rendezvous_ms "$r")")
  echo "ddprun   run $r: ${ddprun_wall[-1]} ms wall, slowest node's rendezvous ${ddprun_rdzv[-1]} ms"
done
torch_wall=()
for ((r = 0; r < torchrun_repeats; r++)); do
  torch_wall+=("$(run_job torchrun "$r")")
  echo "torchrun run $r: ${torch_wall[-1]} ms wall"
done
dw=$(printf '%s\n' "${ddprun_wall[@]}" | median)
dr=$(printf '%s\n' "${ddprun_rdzv[@]}" | median)
tw=$(printf '%s\n' "${torch_wall[@]}" | median)
ratio=$(awk -v t="$tw" -v d="$dw" 'BEGIN {printf "%.1f", t / d}')
table="| $nodes-node c10d rendezvous (start all agents → all exited) | ddprun $dw ms (its rendezvous: $dr ms) | torchrun 1.13 $tw ms | ${ratio}× faster (goal ≥ 5×) |"
echo "$table"
[[ -n $out ]] && echo "$table" >>"$out"
exit 0
