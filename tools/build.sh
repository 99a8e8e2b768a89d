#!/usr/bin/env bash
# Configures and builds the project into build/ (Release). Extra arguments go to CMake's configure
# step, e.g. tools/build.sh -DDDPRUN_WITH_CUDA=ON -DCMAKE_PREFIX_PATH=/path/to/libtorch.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$root/build" -j "$(nproc)"
