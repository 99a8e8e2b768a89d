#!/usr/bin/env bash
# Installs every Debian 12 package that the build, the tests and the demo need. Idempotent; run as root.
# Offline except for Debian's package mirror: nothing here downloads anything else.
set -euo pipefail

packages=(
  build-essential cmake pkg-config ca-certificates curl
  # multi-node tests: etcd (the etcd-v3 rendezvous backend, started on loopback by the tests) and
  # iproute2 (network namespaces joined by veth)
  etcd-server etcd-client iproute2
  # a real Slurm for tests/slurm_test.cpp (controller, two compute nodes and their munge, all started by
  # tools/slurm/local-cluster.sh in a private directory; the packages' own services are not used)
  slurmctld slurmd slurm-client munge
  # worker: LibTorch 1.13 (CPU) and the Gloo headers that ProcessGroupGloo.hpp includes
  libtorch-dev libgloo-dev zlib1g-dev
  # an optimised BLAS: without it LibTorch falls back to reference BLAS, about 10x slower for the MLP
  libopenblas0-pthread
  # launcher, store and shared code
  libboost-dev libboost-filesystem-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  # tests: GoogleTest, and the real PyTorch (Python) for parity and interop tests
  libgtest-dev libgmock-dev python3 python3-torch
  # a real progress bar for the console relay's tests, and a real terminal (tmux) to look at the screen
  python3-tqdm tmux
  # status page tests: promtool (validates /metrics) and a headless browser (renders the page); fonts so the
  # screenshot shows text
  prometheus chromium fonts-dejavu-core
  # a job's end in Prometheus: node_exporter's textfile collector and a Pushgateway, started by the tests on loopback
  prometheus-node-exporter prometheus-pushgateway
  # the store's fuzz test: clang and its libFuzzer runtime (libclang_rt.fuzzer, only recommended by clang)
  clang libclang-rt-14-dev
  # the style check (.clang-format, tools/check-format.sh, the format_check test)
  clang-format
  # hang detection: eu-stack prints a hung rank's native stacks (gdb is the fallback)
  elfutils gdb
  # data: full Fashion-MNIST (60k/10k, IDX) for the accuracy test and the benchmark
  dataset-fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup.sh: missing packages (${missing[*]}); run as root to install them" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup.sh: all ${#packages[@]} packages already installed"
fi
