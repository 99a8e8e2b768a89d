#!/usr/bin/env bash
# Where the time of a large rendezvous goes, and an A/B of builds: one --nnodes NODES job per run (c10d on one loopback
# endpoint, one trivial worker per node, every agent started at once by spawn_nodes.py, as rendezvous_vs_torchrun.sh
# does), every agent's log lines timed from the first agent's first line: the last agent's first line (the start-up
# queue), the round closed after the last arrival (the first node told minus the last agent's first line: the
# protocol's own time, its last ticket, the close and every assignment written), when nodes were told their ranks ("rendezvous round 0 complete": the first, half, 90%, the last), the
# slowest node's own "complete in", the last worker started, and the spawner's start → all exited. With several
# BUILDS, runs alternate between them (RUNS rounds), so that the machine's drift from hour to hour falls on all alike.
# Also the agents' CPU: user + system time of every agent with its orphan guard and worker (wait4), per node.
# The agents' run directories and logs go to SCRATCH (default /dev/shm, a tmpfs): on a cluster every node makes its
# two run directories in its own /tmp, while here 1,024 agents share one directory, and on this machine's root file
# system (ext4 without a journal) each new inode is found by skipping every inode deleted in the last 5-35 s
# (ext4's recently_deleted()): after the previous run's 3,000 files, a mkdir or log file creation took 0.5 ms.
# Usage: tools/bench/rendezvous_timeline.sh [--out FILE]
# The store's host waits close_timeout (CLOSE_TIMEOUT, ddprun's default 30 s) for the other nodes to finish; where the
# end of 1,024 agents sharing two slow cores takes longer (29-60 s were seen), give it more (on a cluster each node
# ends on its own cores).
#   env: NODES=1024 RUNS=3 CLOSE_TIMEOUT=30 BUILDS="<ddprun binary> ..." (default: this tree's build; each with its ddprun-orphan-guard
#   beside it, e.g. two builds copied to their own directories), SCRATCH=/dev/shm
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/tools/bench/out_arg.sh" "$@"
nodes=${NODES:-1024}
runs=${RUNS:-3}
read -r -a builds <<<"${BUILDS:-$root/build/bin/ddprun}"
for build in "${builds[@]}"; do
  [[ -x $build ]] || { echo "$0: $build: not an executable (tools/build.sh builds build/bin/ddprun)" >&2; exit 1; }
done
tmp=$(mktemp -d -p "${SCRATCH:-/dev/shm}")
trap 'pkill -KILL -f "rdzv.id.timeline-$$" 2>/dev/null || true; rm -rf "$tmp"' EXIT
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# One job of `nodes` agents of `build`; prints its timeline as one Markdown row.
run_job() {  # run_job build label
  local build=$1 label=$2 dir result
  dir=$tmp/$label
  mkdir -p "$dir"
  result=$(TMPDIR=$dir /usr/bin/python3 "$root/tools/bench/spawn_nodes.py" "$nodes" "$dir/n-{i}.log" "$build" \
    --nnodes "$nodes" --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$(free_port)" \
    --rdzv-id "timeline-$$-$label" --rdzv-conf "close_timeout=${CLOSE_TIMEOUT:-30}" --local-addr "{addr}" \
    --no-python true)
  /usr/bin/python3 - "$dir" "$result" "$build" "$nodes" <<'PY'
import datetime, glob, re, sys
d, result, build, nodes = sys.argv[1], sys.argv[2].split(), sys.argv[3], int(sys.argv[4])
def stamp(line):  # the log line's own time stamp, in seconds
    m = re.match(r"\[(\d+-\d+-\d+ \d+:\d+:\d+\.\d+)\]", line)
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp() if m else None
first, told, own, started = [], [], [], []
for f in glob.glob(d + "/n-*.log"):
    lines = [(stamp(line), line) for line in open(f).read().splitlines()]
    lines = [(t, line) for t, line in lines if t is not None]
    if lines: first.append(lines[0][0])
    for t, line in lines:
        if m := re.search(r"round 0 complete in (\d+) ms", line):
            told.append(t); own.append(int(m.group(1)) / 1000)
        if "started 1 worker" in line: started.append(t)
zero = min(first, default=0)  # the first agent's first log line
first, told, started = [[t - zero for t in v] for v in (first, told, started)]
def q(v, p): v = sorted(v); return v[min(len(v) - 1, int(p * len(v)))]
if not told:
    print(f"| {build} | no node completed its rendezvous ({result[1]} agents failed) |"); sys.exit()
print(f"| {build} | {max(own):.2f} s | {max(first):.2f} s | {max(0.0, min(told) - max(first)):.2f} s | "
      f"{min(told):.2f} / {q(told, .5):.2f} / {q(told, .9):.2f} / {max(told):.2f} s | {max(told) - min(told):.2f} s | {max(started):.2f} s | {int(result[0]) / 1000:.2f} s | "
      f"{int(result[2]) / nodes:.1f} ms | {result[1]} |")
PY
  rm -rf "$dir"
}

{
  echo "== $nodes nodes, $runs run(s) of each build, alternating; times after the first agent's first log line"
  echo "| build | slowest own rendezvous | last agent's first log line | round closed after the last arrival | told: first / half / 90% / last | last told after the first | last worker started | start → all exited (spawner's clock) | CPU per node | agents failed |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for run in $(seq "$runs"); do
    for i in "${!builds[@]}"; do
      run_job "${builds[$i]}" "r$run-b$i"
    done
  done
} | tee ${out:+"$out"}
