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

# The installed product runs its own examples as the README and the shipped configs write them, from an empty
# directory: the worker found beside ddprun, the MNIST sample found where it is installed.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
run_examples() {  # run_examples PREFIX LABEL
  local prefix=$1 label=$2 dir out port
  dir=$(mktemp -d "$tmp/empty.XXXX")
  out=$(cd "$dir" && "$prefix/bin/ddprun" --nproc-per-node 2 --standalone ddprun-worker --epochs 1 2>&1) ||
    fail "$label: the README's MNIST example failed: $out"
  grep -q "epoch 1/1 done" <<<"$out" || fail "$label: the README's example did not train: $out"
  out=$(cd "$dir" && PATH="$prefix/bin:$PATH" ddprun --config "$prefix/share/ddprun/configs/mnist-2proc.json" 2>&1) ||
    fail "$label: configs/mnist-2proc.json failed: $out"
  grep -q "all workers exited 0" <<<"$out" || fail "$label: configs/mnist-2proc.json: $out"
  [[ -d "$dir/checkpoints/mnist-2proc" ]] || fail "$label: configs/mnist-2proc.json wrote no checkpoint in $dir"
  # The Slurm example as an srun step of 2 nodes would start it (its environment), on loopback; one rank per node
  # instead of one per GPU (no GPU here), the endpoint on a free port instead of Slurm's first node.
  port=$(free_port)
  for node in 0 1; do
    (cd "$dir" && SLURM_JOB_ID=58 SLURM_NNODES=2 SLURM_NODEID=$node SLURM_JOB_NODELIST=localhost PATH="$prefix/bin:$PATH" \
       ddprun --config "$prefix/share/ddprun/configs/slurm-2node.json" --nproc-per-node 1 \
       --rdzv-endpoint "127.0.0.1:$port" > "$dir/node$node.log" 2>&1) &
  done
  wait %1 || fail "$label: configs/slurm-2node.json, node 0: $(tail -5 "$dir/node0.log")"
  wait %2 || fail "$label: configs/slurm-2node.json, node 1: $(tail -5 "$dir/node1.log")"
  grep -q "epoch 3/3 done" "$dir"/node*.log || fail "$label: configs/slurm-2node.json did not train: $(tail -5 "$dir/node0.log")"
}
if [[ -x "$build/bin/worker" ]]; then
  [[ -x "$tmp/prefix/bin/ddprun-worker" ]] || fail "the worker is built but not installed"
  run_examples "$tmp/prefix" "cmake --install"
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
description=$(dpkg-deb --field "$deb" Description)
# Two strings in CPACK_PACKAGE_DESCRIPTION once made a CMake list: a line of the description began with its ';'.
! grep -q "^ *;" <<<"$description" || fail "the package's description holds a stray ';': $description"
contents=$(dpkg-deb --contents "$deb")
for f in ./usr/bin/ddprun ./usr/bin/ddprun-store ./usr/libexec/ddprun/ddprun-orphan-guard ./usr/share/doc/ddprun/README.md; do
  grep -q " $f\$" <<<"$contents" || fail "$f missing from the package"
done
# Every dependency resolvable on this Debian 12 (apt's simulation installs nothing).
apt-get install -s "$deb" > "$tmp/apt.log" 2>&1 || fail "apt cannot install the package: $(tail -5 "$tmp/apt.log")"
grep -q "Inst ddprun" "$tmp/apt.log" || fail "apt's simulation did not install ddprun: $(cat "$tmp/apt.log")"
# The package's files, unpacked (as dpkg would put them under /), run the same examples.
if [[ -x "$build/bin/worker" ]]; then
  dpkg-deb -x "$deb" "$tmp/deb"
  run_examples "$tmp/deb/usr" ".deb"
fi
echo "install_test: installed, ran a 2-rank job from the prefix, packaged $(basename "$deb") ($depends)"
