#!/usr/bin/env bash
# A pip torch's libtorch.so exports a broken copy of libstdc++'s std::filesystem (pytorch/pytorch#133437; on torch
# 2.11 std::filesystem::remove_all jumps to address 0), and the dynamic linker binds a program's calls to the
# first library that defines a symbol. Every LibTorch program must therefore list libstdc++ before libtorch.so
# among its NEEDED libraries (CMakeLists.txt: DDPRUN_TORCH_LIBRARIES).
# Usage: link_order_test.sh PROGRAM...
set -uo pipefail
fail=0
for program in "$@"; do
  needed=$(readelf -d "$program" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  stdcxx=$(grep -n '^libstdc++\.so' <<<"$needed" | head -n 1 | cut -d: -f1)
  torch=$(grep -n '^libtorch\.so' <<<"$needed" | head -n 1 | cut -d: -f1)
  if [[ -z $torch ]]; then
    echo "FAIL: $program does not link libtorch.so"; fail=1
  elif [[ -n $stdcxx ]] && ((stdcxx < torch)); then
    echo "PASS: $program: libstdc++ is NEEDED entry $stdcxx, libtorch.so $torch"
  else
    echo "FAIL: $program: libstdc++ is NEEDED entry ${stdcxx:-none}, after libtorch.so ($torch):"
    echo "$needed" | sed 's/^/  /'
    fail=1
  fi
done
exit $fail
