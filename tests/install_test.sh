#!/usr/bin/env bash
# The installed product: `cmake --install` into a temporary prefix, --version of both programs, a 2-rank job run
# from the installed binaries and data, and the Debian package CPack makes (its name, version, dependencies,
# files, and that apt can install it on this Debian 12 machine, checked with apt's simulation).
# Usage: install_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log" || fail "cmake --install: $(tail -5 "$tmp/install.log")"
for f in bin/ddprun bin/ddprun-store libexec/ddprun/ddprun-orphan-guard share/doc/ddprun/README.md share/doc/ddprun/LICENSE share/doc/ddprun/launcher.md \
         share/ddprun/configs/mnist-2proc.json share/ddprun/data/mnist/t10k-images-idx3-ubyte.gz; do
  [[ -e "$tmp/prefix/$f" ]] || fail "not installed: $f"
done

commit=$(git -C "$(dirname "$0")/.." rev-parse --short=12 HEAD 2>/dev/null || true)
for program in ddprun ddprun-store; do
  version=$("$tmp/prefix/bin/$program" --version)
  [[ "$version" == "$program 0."* ]] || fail "$program --version printed '$version'"
  if [[ -n "$commit" ]]; then
    [[ "$version" == *"(commit $commit)"* ]] || fail "$program --version '$version' does not name commit $commit"
  fi
done

# The installed ddprun finds its orphan guard in ../libexec/ddprun: its guardian (a child of ddprun, a sibling of the
# worker) is that program, not a fork of ddprun.
# shellcheck disable=SC2016  # the worker's own script: its variables are the worker's
guardian=$("$tmp/prefix/bin/ddprun" --nproc-per-node 1 --standalone bash -c \
  'for s in /proc/[0-9]*/stat; do read -r pid rest < "$s" 2>/dev/null || continue; set -- $rest;
     if [[ $3 == "$PPID" ]]; then readlink "/proc/$pid/exe"; fi; done' 2>/dev/null) ||
  fail "a 1-rank job of the installed ddprun failed"
grep -q "^\[rank0\]:$tmp/prefix/libexec/ddprun/ddprun-orphan-guard\$" <<<"$guardian" ||
  fail "the installed ddprun's guardian is not its ddprun-orphan-guard: ddprun's other children: $guardian"

if [[ -x "$build/bin/worker" ]]; then
  [[ -x "$tmp/prefix/bin/ddprun-worker" ]] || fail "the worker is built but not installed"
  out=$(cd "$tmp" && "$tmp/prefix/bin/ddprun" --nproc-per-node 2 --standalone "$tmp/prefix/bin/ddprun-worker" \
          --data-dir "$tmp/prefix/share/ddprun/data/mnist" --max-steps 20 --log-every 10 2>&1) \
    || fail "the installed 2-rank job failed: $out"
  grep -q "stopped at --max-steps 20" <<<"$out" || fail "the installed job did not train: $out"
  grep -q "all workers exited 0" <<<"$out" || fail "ddprun did not see both workers succeed: $out"
fi

(cd "$build" && cpack -G DEB -B "$tmp/pkg" > "$tmp/cpack.log" 2>&1) || fail "cpack: $(tail -20 "$tmp/cpack.log")"
deb=$(ls "$tmp"/pkg/ddprun_*.deb)
info=$(dpkg-deb --info "$deb")
grep -q "Package: ddprun" <<<"$info" || fail "package name: $info"
grep -q "Version: 0\." <<<"$info" || fail "package version: $info"
depends=$(grep "Depends:" <<<"$info" | head -1)
# Every library a packaged program needs directly (its NEEDED entries) comes from a package that Depends names.
needed=(libc6)
for bin in "$build"/bin/ddprun "$build"/bin/ddprun-orphan-guard "$build"/bin/ddprun-store "$build"/bin/worker; do
  [[ -x $bin ]] || continue
  while read -r soname; do
    [[ $soname == ld-linux* ]] && continue  # the dynamic linker itself (libc6)
    path=$(ldd "$bin" | awk -v so="$soname" '$1 == so && $3 ~ /^\// {print $3}')
    [[ -n $path ]] || fail "$bin: $soname does not resolve"
    owner=$(dpkg -S "$path" 2>/dev/null || dpkg -S "$(readlink -f "$path")" 2>/dev/null || true)
    [[ -n $owner ]] || fail "$bin: no package owns $path"
    needed+=("${owner%%:*}")
  done < <(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done
[[ -x "$build/bin/worker" ]] && needed+=(libtorch)
# spdlog, fmt and the C++ library are compiled into ddprun, its orphan guard and ddprun-store
# (common/spdlog_static.cpp, -static-libstdc++): the dynamic linker has fewer libraries to load at every agent start.
# glibc is loaded from the system, so host names resolve through every NSS source /etc/nsswitch.conf names.
for bin in "$build"/bin/ddprun "$build"/bin/ddprun-orphan-guard "$build"/bin/ddprun-store; do
  loaded=$(ldd "$bin" 2>&1) || fail "$bin is not a dynamic executable: $loaded"
  grep -q "libc\.so" <<<"$loaded" || fail "$bin does not load the system's glibc: $loaded"
  for lib in libspdlog libfmt libstdc++; do
    grep -q "$lib" <<<"$loaded" && fail "$bin loads $lib: $loaded"
  done
done
for lib in "${needed[@]}"; do
  grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib: $depends"
done
contents=$(dpkg-deb --contents "$deb")
for f in ./usr/bin/ddprun ./usr/bin/ddprun-store ./usr/libexec/ddprun/ddprun-orphan-guard ./usr/share/doc/ddprun/README.md; do
  grep -q " $f\$" <<<"$contents" || fail "$f missing from the package"
done
# Every dependency resolvable on this Debian 12 (apt's simulation installs nothing).
apt-get install -s "$deb" > "$tmp/apt.log" 2>&1 || fail "apt cannot install the package: $(tail -5 "$tmp/apt.log")"
grep -q "Inst ddprun" "$tmp/apt.log" || fail "apt's simulation did not install ddprun: $(cat "$tmp/apt.log")"
echo "install_test: installed, ran a 2-rank job from the prefix, packaged $(basename "$deb") ($depends)"
