#!/usr/bin/env bash
# Builds the store's libFuzzer target (store_request_fuzz.cpp with the parser, handler and state) with
# clang, then fuzzes for SECONDS (default 60) from the seed corpus. Usage: run_fuzz.sh BUILD_DIR [SECONDS]
# A crash fails the run and is left in BUILD_DIR/fuzz/crash-*: keep it as a regression input with
#   cp BUILD_DIR/fuzz/crash-* tests/fuzz/regressions/
# (store_fuzz_replay_test replays that folder in every build). Exits 77 (ctest: skipped) when clang or
# libFuzzer is missing; tools/setup.sh installs both.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out="${1:?usage: run_fuzz.sh BUILD_DIR [SECONDS]}/fuzz"
seconds="${2:-60}"
clang=$(command -v clang++ || command -v clang++-14 || true)
if [[ -z "$clang" ]]; then
  echo "SKIPPED: clang++ not found; install clang and libclang-rt-14-dev (tools/setup.sh does) to fuzz the store"
  exit 77
fi
mkdir -p "$out/corpus"
sources=(store/request_parser.cpp store/wire_protocol.cpp store/kv_state.cpp store/command_handler.cpp
         store/log_text.cpp store/reply.cpp tests/fuzz/store_request_fuzz.cpp)
binary="$out/store_request_fuzz"
stale=0
for s in "${sources[@]}" store/*.hpp; do [[ ! -e "$binary" || "$root/$s" -nt "$binary" ]] && stale=1; done
if ((stale)); then
  echo "building $binary with $clang"
  if ! (cd "$root" && "$clang" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
          -I"$root" $(pkg-config --cflags spdlog) "${sources[@]}" -o "$binary" $(pkg-config --libs spdlog)) \
       2> "$out/build.log"; then
    if grep -q "libclang_rt.fuzzer\|fsanitize=fuzzer" "$out/build.log"; then
      echo "SKIPPED: clang has no libFuzzer runtime here (install libclang-rt-14-dev; tools/setup.sh does)"
      cat "$out/build.log"
      exit 77
    fi
    cat "$out/build.log"
    exit 1
  fi
fi
echo "fuzzing for ${seconds} s from tests/fuzz/corpus"
"$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$out/" "$out/corpus" "$root/tests/fuzz/corpus" || {
  echo "the fuzzer found a crash: see above; keep it with: cp $out/crash-* $root/tests/fuzz/regressions/"
  exit 1
}
