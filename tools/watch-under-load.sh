#!/usr/bin/env bash
# The hang watch's real-job tests (tests/watch_test.cpp: stock python3-torch jobs under ddprun) on a loaded machine:
# two busy loops per core, as CI machines and shared nodes often are, for the whole run; ROUNDS times in a row
# (default 3), stopping at the first failure. docs/testing.md records the last result.
#   tools/watch-under-load.sh [build dir]   (ROUNDS=3, LOOPS_PER_CORE=2, FILTER='^Watch\.')
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
rounds=${ROUNDS:-3}
per_core=${LOOPS_PER_CORE:-2}
filter=${FILTER:-'^Watch\.'}
loops=()
stop_loops() { ((${#loops[@]})) && kill "${loops[@]}" 2>/dev/null; wait 2>/dev/null || true; }
trap stop_loops EXIT
for ((i = 0; i < per_core * $(nproc); ++i)); do
  sh -c 'while :; do :; done' &
  loops+=($!)
done
echo "watch-under-load: ${#loops[@]} busy loops on $(nproc) cores; $rounds round(s) of ctest -R '$filter'"
for ((round = 1; round <= rounds; ++round)); do
  start=$(date +%s)
  if ! (cd "$build" && ctest -R "$filter" --output-on-failure --timeout 900 -j "$(nproc)"); then
    echo "watch-under-load: round $round failed ($(($(date +%s) - start)) s)"
    exit 1
  fi
  echo "watch-under-load: round $round passed ($(($(date +%s) - start)) s, load $(cut -d' ' -f1 /proc/loadavg))"
done
echo "watch-under-load: $rounds of $rounds rounds passed"
