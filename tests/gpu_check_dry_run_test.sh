#!/usr/bin/env bash
# tools/gpu-check.sh in its CPU dry run against the CI build (BUILD_DIR, --skip-build) and the carried MNIST
# sample: every step must pass, the table must hold a row per model and setup, and C++ and Python must
# reach the same test accuracy in each row (same data, init, sampler and arithmetic; --amp included).
# A failed step must fail the script. Usage: gpu_check_dry_run_test.sh BUILD_DIR
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: $0 BUILD_DIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
check() { if "${@:2}"; then echo "PASS: $1"; else echo "FAIL: $1"; fail=1; fi; }

OUT=$work/ok BUILD_DIR=$build DATA_DIR=$root/data/mnist PYTHON=/usr/bin/python3 \
  timeout 600 bash "$root/tools/gpu-check.sh" --cpu-dry-run --skip-build >"$work/ok.log" 2>&1
rc=$?
check "dry run exits 0" test "$rc" -eq 0
table=$work/ok/gpu-check.md
check "six training rows" test "$(grep -cE '^\| (mlp|cnn) \| gloo' "$table" 2>/dev/null)" -eq 6
# Columns: | model | setup | precision | C++ time | C++ samples/s | C++ acc | Py time | Py samples/s | Py acc | ratio |
same_accuracy() {
  awk -F' \\| ' '/^\| (mlp|cnn) \| gloo/ { if ($6 != $9 || $6 !~ /%$/) bad = 1; n++ } END { exit (bad || n != 6) }' "$table"
}
check "C++ and Python reach the same test accuracy in every row" same_accuracy
check "store conformance and stock DDP steps passed" \
  grep -qE '^\| stock-ddp-under-ddprun \| ok' "$table"
check "logs archived" test -s "$work/ok/gpu-check-logs.tar.gz"
check "two ddprun nodes: an agent judged rank 1's skipped allreduce a hang" grep -qE '^\| two-rank-hang \| ok' "$table"
# The speed table's dry run: both eager implementations per configuration, every run parsed, the same accuracy.
speed=$work/ok/gpu-speed.md
check "speed table: C++ eager and Python DDP rows for 3 configurations" \
  test "$(grep -cE '^\| (mlp|cnn) \| (fp32|bf16) \| (C\+\+, eager|Python DDP) \| 1 of 1 \|' "$speed" 2>/dev/null)" -eq 6
# Fields split on " | ": 1 model, 2 precision, 3 implementation, ..., 8 test accuracy.
same_speed_accuracy() {
  awk -F' \\| ' '/^\| (mlp|cnn) \| (fp32|bf16) \|/ { k = $1 "/" $2; if ((k in a) && a[k] != $8) bad = 1; a[k] = $8; n++ }
    END { exit (bad || n != 6) }' "$speed"
}
check "speed table: C++ and Python reach the same test accuracy per configuration" same_speed_accuracy

# The unit tests passed in the first run: not again here.
OUT=$work/bad BUILD_DIR=$build DATA_DIR=$work/no-such-data PYTHON=/usr/bin/python3 UNIT_TESTS=0 TWO_RANK_HANG=0 \
  timeout 600 bash "$root/tools/gpu-check.sh" --cpu-dry-run --skip-build >"$work/bad.log" 2>&1
rc=$?
check "a failed step fails the script" test "$rc" -ne 0
check "failed runs still give a table" grep -qE '^\| mlp \| gloo, 1 rank \| fp32 \| failed' "$work/bad/gpu-check.md"

if ((fail)); then
  echo "--- dry run log"; cat "$work/ok.log"; [[ -f $table ]] && cat "$table"
fi
exit $fail
