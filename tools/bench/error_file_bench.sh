#!/usr/bin/env bash
# What a rank's hostile or huge TORCHELASTIC_ERROR_FILE costs ddprun (issue 59 item 1: peak RSS <= 64 MiB, no stall of
# the agent's loop >= 100 ms, for any file up to 16 MiB). Two views of each file:
#  - loop ms: describeFailure + the failure summary, the work done on the agent's loop (build/bin/error_file_bench);
#  - ddprun peak RSS: a real 1-rank job whose rank copies the file to its error file and exits 1 (/usr/bin/time).
# Usage: tools/bench/error_file_bench.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp" <<'PY'
import json, sys
d, mib = sys.argv[1], 1 << 20
open(f"{d}/brackets-16MiB.json", "w").write("[" * (16 * mib))
open(f"{d}/brackets-1MiB.json", "w").write("[" * mib)
open(f"{d}/message-brackets-1MiB.json", "w").write('{"message":' + "[" * (mib - 16))
open(f"{d}/ones-1MiB.json", "w").write("[" + "1," * (mib // 2 - 2) + "1]")
open(f"{d}/ones-16MiB.json", "w").write("[" + "1," * (8 * mib - 2) + "1]")
tb = "Traceback (most recent call last):\n" + "".join(f'  File "x.py", line {i}\n' for i in range(40000))
cut = mib
while True:  # the largest file under the bound: a long message, a traceback of thousands of frames, a bad timestamp
    big = json.dumps({"message": {"message": "E: " + "m" * 100000,
                                  "extraInfo": {"py_callstack": tb[:cut], "timestamp": "9223372036854775807"}}})
    if len(big) <= mib:
        break
    cut -= 4096
open(f"{d}/traceback-1MiB.json", "w").write(big)
open(f"{d}/traceback-16MiB.json", "w").write(json.dumps({"message": {"message": "E", "extraInfo": {
    "py_callstack": "x" * (16 * mib - 100), "timestamp": "1"}}}))
PY
printf '%-28s %10s %14s %14s %16s\n' file "loop ms" "bench RSS MiB" "summary bytes" "ddprun RSS MiB"
for f in "$tmp"/*.json; do
  read -r _ ms rss bytes < <("$build/bin/error_file_bench" "$f")
  ddprun_rss=$( { /usr/bin/time -f '%M' "$build/bin/ddprun" --standalone sh -c "cp '$f' \"\$TORCHELASTIC_ERROR_FILE\"; exit 1" \
                  >/dev/null 2>"$tmp/err" || true; } ; tail -1 "$tmp/err")
  printf '%-28s %10s %14s %14s %16.1f\n' "$(basename "$f")" "$ms" "$rss" "$bytes" "$(echo "$ddprun_rss / 1024" | bc -l)"
done
