#!/usr/bin/env bash
# A real Slurm cluster on this one machine, for trying tools/slurm/*.sbatch without a cluster: Debian's
# slurmctld and two slurmd (nodes sn1 and sn2), each in its own network namespace and with its own host name,
# joined by a bridge, and a private munged for their authentication. Everything lives under DIR; nothing of the
# machine's own Slurm or munge configuration is read or changed. Needs root (network namespaces).
#
#   tools/slurm/local-cluster.sh start DIR   # waits (at most 60 s) until both nodes are idle
#   tools/slurm/local-cluster.sh run DIR CMD [ARGS...]   # runs a Slurm client (sbatch, squeue, scancel, ...)
#   tools/slurm/local-cluster.sh stop DIR    # ends the daemons and every job step, removes the namespaces
#
# Layout: controller "slurmctl" 10.214.N.1 (namespace ddpslurm-N-ctl, which also holds the bridge), nodes
# sn1 10.214.N.11 and sn2 10.214.N.12 (namespaces ddpslurm-N-sn1/-sn2); N is the first free one from
# $LOCAL_CLUSTER_NET (default: the script's pid mod 250), so two clusters can run side by side. Host names resolve through
# /etc/netns/<namespace>/hosts, which `ip netns exec` mounts over /etc/hosts inside the namespace.
# Each node declares 2 CPUs whatever the machine has (SlurmdParameters=config_overrides).
# Logs: DIR/slurmctld.log, DIR/slurmd-sn1.log, DIR/slurmd-sn2.log, DIR/munged.log.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
cmd=${1:-}
dir=${2:-}
[[ -n $cmd && -n $dir ]] || { usage >&2; exit 2; }
dir=$(realpath -m "$dir")

nodes=(sn1 sn2)
# The namespace names and the subnet are kept in DIR so that `run` and `stop` find the ones `start` made.
load_net() {
  [[ -f $dir/net ]] || { echo "local-cluster: no cluster in $dir (start it first)" >&2; exit 1; }
  net=$(<"$dir/net")
}
ns() { echo "ddpslurm-$net-$1"; }
in_ns() { local where=$1; shift; ip netns exec "$(ns "$where")" "$@"; }

write_hosts() {
  local hosts="127.0.0.1 localhost
10.214.$net.1 slurmctl
10.214.$net.11 sn1
10.214.$net.12 sn2"
  for where in ctl "${nodes[@]}"; do
    mkdir -p "/etc/netns/$(ns "$where")"
    echo "$hosts" >"/etc/netns/$(ns "$where")/hosts"
  done
}

# Claims a subnet: the first N (from $LOCAL_CLUSTER_NET or the pid) whose controller namespace this script can
# create; another cluster on the machine holds the others.
claim_net() {
  local first=${LOCAL_CLUSTER_NET:-$(($$ % 250))}
  for try in $(seq 0 249); do
    net=$(((first + try) % 250))
    if ip netns add "$(ns ctl)" 2>/dev/null; then
      echo "$net" >"$dir/net"
      return 0
    fi
  done
  echo "local-cluster: no free subnet 10.214.N.0/24 (ip netns add failed for every N; needs root)" >&2
  return 1
}

make_network() {
  in_ns ctl ip link set lo up
  in_ns ctl ip link add br0 type bridge
  in_ns ctl ip addr add "10.214.$net.1/24" dev br0
  in_ns ctl ip link set br0 up
  local i=11
  for node in "${nodes[@]}"; do
    ip netns add "$(ns "$node")"
    in_ns "$node" ip link set lo up
    # The node's end is called eth0 in every node namespace (a name users' GLOO_SOCKET_IFNAME may name).
    ip link add "ddps$net$node" type veth peer name eth0 netns "$(ns "$node")"
    ip link set "ddps$net$node" netns "$(ns ctl)"
    in_ns ctl ip link set "ddps$net$node" master br0 up
    in_ns "$node" ip addr add "10.214.$net.$i/24" dev eth0
    in_ns "$node" ip link set eth0 up
    i=$((i + 1))
  done
}

write_conf() {
  cat >"$dir/slurm.conf" <<EOF
# Written by tools/slurm/local-cluster.sh: one controller and two nodes on one machine.
ClusterName=ddprun-local
SlurmctldHost=slurmctl(10.214.$net.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups: a container may not offer them; processes are tracked by their parent pids.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdParameters=config_overrides
# Slurm's default time from a job's SIGTERM to its SIGKILL.
KillWait=30
NodeName=sn1 NodeAddr=10.214.$net.11 CPUs=2 State=UNKNOWN
NodeName=sn2 NodeAddr=10.214.$net.12 CPUs=2 State=UNKNOWN
PartitionName=local Nodes=sn1,sn2 Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
  mkdir -p "$dir/munge"
  chmod 0700 "$dir/munge"
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$dir/munge/munge.key"
  # --force: munged runs as root here (the cluster is root's own, in a private directory).
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed"
}

# Runs `program` in the network namespace of `where`, with its own host name and /etc/hosts. Not `ip netns exec`:
# that remounts /sys, and slurmd refuses to start without the cgroup file systems under /sys/fs/cgroup.
start_daemon() {
  local where=$1 host=$2
  shift 2
  nsenter --net="/run/netns/$(ns "$where")" unshare --mount --uts \
    sh -c 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"' \
    "/etc/netns/$(ns "$where")/hosts" "$host" "$@"
}

wait_idle() {
  local deadline=$((SECONDS + 60)) state=""
  while ((SECONDS < deadline)); do
    state=$(in_ns ctl env SLURM_CONF="$dir/slurm.conf" sinfo -h -N -o '%N %t' 2>/dev/null || true)
    if [[ $(grep -c ' idle$' <<<"$state") -eq ${#nodes[@]} ]]; then return 0; fi
    sleep 0.2
  done
  echo "local-cluster: the nodes did not become idle within 60 s (sinfo: ${state:-no answer}); see $dir/*.log" >&2
  return 1
}

start() {
  # slurm.conf cannot quote a path with a space (its parser splits at it).
  [[ $dir != *[[:space:]]* ]] || { echo "local-cluster: DIR must not contain spaces: '$dir'" >&2; exit 2; }
  if [[ -f $dir/net ]] && ip netns list | grep -q "^ddpslurm-$(<"$dir/net")-ctl"; then
    echo "local-cluster: a cluster is already running in $dir (stop it first: $0 stop $dir)" >&2
    exit 1
  fi
  mkdir -p "$dir/ctld" "$dir/spool"
  # Whatever fails from here on, nothing of a half-started cluster stays behind.
  trap 'if (($? != 0)); then echo "local-cluster: start failed; cleaning up (logs in $dir)" >&2; stop; fi' EXIT
  claim_net
  make_network
  write_hosts
  write_conf
  start_munge
  start_daemon ctl slurmctl slurmctld -f "$dir/slurm.conf"
  for node in "${nodes[@]}"; do
    mkdir -p "$dir/spool/$node"
    start_daemon "$node" "$node" slurmd -f "$dir/slurm.conf" -N "$node"
  done
  wait_idle
  trap - EXIT
  echo "local-cluster: up in $dir (controller 10.214.$net.1; run clients with: $0 run $dir sbatch ...)"
}

# Sends SIGTERM to the daemons named by the pid files, waits up to 10 s for all of them, then SIGKILLs the rest.
stop_daemons() {
  local pids=() pid
  for file in "$@"; do
    [[ -f $file ]] || continue
    pid=$(<"$file")
    # Only a daemon of this cluster: its command line names this cluster's directory.
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$dir/" || continue
    kill "$pid" 2>/dev/null && pids+=("$pid")
  done
  local deadline=$((SECONDS + 10))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}

# Cancels every job and waits (at most 30 s) until Slurm has ended them: their processes are children of the
# nodes' slurmstepd, which outlive slurmd.
cancel_jobs() {
  local client=(in_ns ctl env SLURM_CONF="$dir/slurm.conf")
  "${client[@]}" scancel --quiet --partition=local 2>/dev/null || return 0
  local deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)); do
    [[ -z $("${client[@]}" squeue -h -o %i 2>/dev/null) ]] && return 0
    sleep 0.2
  done
  echo "local-cluster: jobs still listed 30 s after scancel" >&2
}

stop() {
  load_net
  cancel_jobs
  stop_daemons "$dir/slurmd-sn1.pid" "$dir/slurmd-sn2.pid" "$dir/slurmctld.pid"
  stop_daemons "$dir/munge/munged.pid"
  for where in "${nodes[@]}" ctl; do
    ip netns del "$(ns "$where")" 2>/dev/null || true
    rm -rf "/etc/netns/$(ns "$where")"
  done
  # A pid file left by a daemon that was killed would name some other process later.
  rm -f "$dir"/slurmd-*.pid "$dir/slurmctld.pid" "$dir/munge/munged.pid" "$dir/net"
}

case $cmd in
  start) start ;;
  stop) stop ;;
  run)
    load_net
    shift 2
    in_ns ctl env SLURM_CONF="$dir/slurm.conf" "$@"
    ;;
  *) usage >&2; exit 2 ;;
esac
