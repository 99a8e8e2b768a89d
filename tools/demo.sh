#!/usr/bin/env bash
# README command 1: installs the Debian packages, builds, and runs the main job: 2 worker ranks
# training the MLP on MNIST with DDP on the CPU (--backend auto: shared memory on one host) for one epoch
# under ddprun, on the data the repo carries.
# Extra arguments go to the worker, e.g. tools/demo.sh --epochs 3 --model cnn.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/tools/setup.sh"
bash "$root/tools/build.sh"
cd "$root"
exec build/bin/ddprun --nproc-per-node 2 --standalone build/bin/worker --data-dir data/mnist --epochs 1 "$@"
