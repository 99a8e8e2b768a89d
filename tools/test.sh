#!/usr/bin/env bash
# README command 2 (and CI's .ci/run): installs the Debian packages, builds, and runs every test.
# Fails when any test fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/tools/setup.sh"
bash "$root/tools/build.sh"
cd "$root/build"
# One test per core at a time: most wait on processes, sockets and timers, and every timing bound is generous.
ctest --output-on-failure --timeout 600 -j "$(nproc)" "$@"
