#!/usr/bin/env bash
# A pip torch's libtorch.so exports copies of libstdc++'s std::filesystem (pytorch/pytorch#133437), and torch 2.11's
# remove_all crashes when a program's call reaches it. Every LibTorch target links LibTorch through
# ddprun_link_stdcxx_first (CMakeLists.txt), which names libstdc++ first. Here a library that exports its own
# remove_all (exit code 42) stands in for LibTorch:
#   PROTECTED  remove_all_probe linked through ddprun_link_stdcxx_first: libstdc++'s remove_all must run (exit 0);
#   PLAIN      the same probe linked without it: the exporter's runs (exit 42), so the first check can fail.
# Usage: link_order_test.sh PROTECTED PLAIN
set -uo pipefail
protected=${1:?usage: $0 PROTECTED PLAIN}
plain=${2:?usage: $0 PROTECTED PLAIN}
fail=0
output=$("$protected" 2>&1)
rc=$?
if ((rc == 0)) && grep -q "libstdc++'s remove_all removed" <<<"$output"; then
  echo "PASS: linked with libstdc++ first, the probe calls libstdc++'s remove_all"
else
  echo "FAIL: linked with libstdc++ first, the probe exited $rc: $output"
  fail=1
fi
output=$("$plain" 2>&1)
rc=$?
if ((rc == 42)); then
  echo "PASS: linked plainly, the probe calls the exporter's remove_all (the case ddprun_link_stdcxx_first prevents)"
else
  echo "FAIL: linked plainly, the probe exited $rc, not 42 (the exporter no longer stands in for LibTorch): $output"
  fail=1
fi
exit $fail
