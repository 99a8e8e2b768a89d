#!/usr/bin/env bash
# The build's non-LibTorch dependencies for a machine that reaches no package registry (the GPU machine):
# spdlog, fmt, CLI11, nlohmann-json, Boost headers + Boost.Filesystem, zlib and GoogleTest, as Debian 12
# packages. LibTorch itself comes from that machine's pip torch. The pip wheel ships no Gloo headers, and c10d's
# ProcessGroupGloo.hpp needs them, so `download` also stages Gloo's headers from its git repository at a pinned
# commit (Debian's libgloo-dev is older than any torch 2.x's Gloo, so it is not offered as a stand-in; without
# any the worker builds for NCCL alone).
#
#   tools/gpu-deps.sh download   here, with Debian's mirror: `apt-get download` the .debs into .gpu-deps/debs
#                                (about 12 MB), and Fashion-MNIST (60k/10k, 30 MB, from Debian's
#                                dataset-fashion-mnist) into .gpu-deps/fashion-mnist for a timing that is
#                                longer than the carried 9k-image MNIST sample; then the Gloo headers into
#                                .gpu-deps/gloo/include (0.6 MB; see gloo_headers). .gpu-deps/ is git-ignored:
#                                carry .gpu-deps/debs, .gpu-deps/fashion-mnist and .gpu-deps/gloo to the GPU
#                                machine
#   tools/gpu-deps.sh unpack     there (or here, to test): unpacks every .deb into .gpu-deps/root
#                                (what `dpkg -x` does, as `dpkg-deb --fsys-tarfile | tar -x`, 4x faster
#                                than dpkg -x's per-file syncs; `ar` + `tar` where dpkg is missing) and
#                                prints the prefix
#   tools/gpu-deps.sh prefix     prints the CMake prefix (.gpu-deps/root/usr)
#
# Why compiled spdlog/fmt/Boost.Filesystem from Debian can run there: they need glibc >= 2.36 and GCC 12's
# libstdc++, which any newer distribution has (the GPU image's Python 3.12 points at Ubuntu 24.04), and
# torch >= 2.7 wheels use the same C++11 ABI as Debian. The binaries find the .so files through the build
# tree's RPATH (CMake records the directory of each linked library), so nothing is installed system-wide.
# GPU_DEPS_DIR overrides .gpu-deps; FASHION_MNIST_DIR the installed data set's folder; GLOO_GIT the Gloo
# repository (a URL, or a local git directory such as a mirror) and GLOO_COMMIT the commit; GLOO_GIT=none skips
# the headers.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps=${GPU_DEPS_DIR:-$root/.gpu-deps}
gloo_git=${GLOO_GIT:-https://github.com/pytorch/gloo.git}
gloo_commit=${GLOO_COMMIT:-bcd1672ee07538123ea8f4fac76832efc58fb8ef}
packages=(
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev
  libboost1.74-dev libboost-filesystem1.74-dev libboost-filesystem1.74.0
  zlib1g-dev zlib1g libgtest-dev libgmock-dev
)

die() { echo "gpu-deps: $*" >&2; exit 1; }

download() {
  mkdir -p "$deps/debs"
  command -v apt-get >/dev/null || die "apt-get not found: run 'download' on a Debian 12 machine"
  rm -f "$deps"/debs/*.deb
  # apt drops privileges to _apt for the download; a root-owned target dir only gets a warning.
  (cd "$deps/debs" && apt-get download -q "${packages[@]}")
  local count
  count=$(find "$deps/debs" -name '*.deb' | wc -l)
  ((count == ${#packages[@]})) || die "expected ${#packages[@]} .debs, got $count"
  echo "gpu-deps: $count packages, $(du -sh "$deps/debs" | cut -f1) in $deps/debs"
  fetch_fashion_mnist
  [[ $gloo_git == none ]] || gloo_headers
}

# Gloo's public headers at $gloo_commit into $deps/gloo/include, with the gloo/config.h its CMake would generate
# for torch's build (gloo/config.h.in: version 0.5.0; CUDA and TCP on, as in a CUDA wheel; no Redis, ibverbs, MPI,
# libuv or TLS; torch's dtypes). Only declarations are compiled against them: every Gloo call the worker makes goes
# through ProcessGroupGloo's exported functions in the wheel's libtorch, and the worker holds Gloo objects only
# through std::shared_ptr, so the headers need to match the wheel's Gloo in the few classes ProcessGroupGloo.hpp
# names (gloo::Context, transport::Device, rendezvous::Store). Those are unchanged from 2025-09 (d97133a) to
# 2026-03 (6f4c667); the default is the last commit before Gloo moved to C++20 (845824e, 2026-03-11), which torch
# builds before 2.13 (C++17) cannot have pinned.
gloo_headers() {
  local target=$deps/gloo tmp
  tmp=$(mktemp -d)
  if ! gloo_tree "$tmp" || [[ ! -f $tmp/gloo/config.h.in ]]; then
    rm -rf "$tmp"
    echo "gpu-deps: warning: no Gloo headers (commit $gloo_commit from $gloo_git)$([[ -d $target ]] && echo \
      ": $target kept as it was" || echo ": the worker will be built for NCCL alone"); set GLOO_GIT to a reachable" \
      "Gloo repository or a local clone" >&2
    return 0
  fi
  # Staged beside the old copy and swapped in whole, so a failure never leaves half a folder.
  mkdir -p "$tmp/staged/include"
  (cd "$tmp" && find gloo -name '*.h' -not -path 'gloo/test/*' -not -path 'gloo/benchmark/*' -print0 |
    xargs -0 cp --parents -t "$tmp/staged/include")
  sed -e 's/@GLOO_VERSION_MAJOR@/0/; s/@GLOO_VERSION_MINOR@/5/; s/@GLOO_VERSION_PATCH@/0/' \
    -e 's/^#cmakedefine01 \(GLOO_USE_CUDA\|GLOO_HAVE_TRANSPORT_TCP\|GLOO_USE_TORCH_DTYPES\)$/#define \1 1/' \
    -e 's/^#cmakedefine01 \(.*\)$/#define \1 0/' "$tmp/gloo/config.h.in" >"$tmp/staged/include/gloo/config.h"
  grep -q '^#define GLOO_HAVE_TRANSPORT_TCP 1$' "$tmp/staged/include/gloo/config.h" || die "gloo/config.h: generation failed"
  echo "$gloo_commit" >"$tmp/staged/COMMIT"
  rm -rf "$target"
  mv "$tmp/staged" "$target"
  rm -rf "$tmp"
  echo "gpu-deps: Gloo headers at $gloo_commit, $(find "$target/include" -name '*.h' | wc -l) files in $target/include"
}

# Gloo's gloo/ folder at $gloo_commit into DIR: from a local repository (a clone or a bare mirror) or a URL.
gloo_tree() {
  local dir=$1 git_dir
  if [[ -d $gloo_git ]]; then
    git_dir=$(git -C "$gloo_git" rev-parse --absolute-git-dir 2>/dev/null) || return 1
    git --git-dir="$git_dir" archive "$gloo_commit" gloo | tar -x -C "$dir"
  else
    git init -q "$dir/repo" && git -C "$dir/repo" fetch -q --depth 1 "$gloo_git" "$gloo_commit" &&
      git -C "$dir/repo" archive FETCH_HEAD gloo | tar -x -C "$dir"
  fi
}

# Fashion-MNIST's four .gz IDX files: from the installed dataset-fashion-mnist, else from its .deb.
fetch_fashion_mnist() {
  local installed=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist} target=$deps/fashion-mnist
  rm -rf "$target"
  mkdir -p "$target"
  if [[ ! -f $installed/train-images-idx3-ubyte.gz ]]; then
    local tmp
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download -q dataset-fashion-mnist && dpkg -x dataset-fashion-mnist_*.deb root)
    installed=$tmp/root/usr/share/datasets/fashion-mnist
  fi
  cp "$installed"/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz "$target"/
  echo "gpu-deps: Fashion-MNIST, $(du -sh "$target" | cut -f1) in $target"
}

# One .deb into $deps/root: dpkg-deb's file tree where dpkg exists, else its data.tar.* through ar and tar.
unpack_one() {
  local deb=$1
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb --fsys-tarfile "$deb" | tar -xf - -C "$deps/root"
    return
  fi
  local tmp member
  tmp=$(mktemp -d)
  (cd "$tmp" && ar x "$deb")
  member=$(ls "$tmp"/data.tar.* 2>/dev/null | head -n 1)
  [[ -n $member ]] || die "$deb: no data.tar.* inside"
  tar -xf "$member" -C "$deps/root"
  rm -rf "$tmp"
}

unpack() {
  compgen -G "$deps/debs/*.deb" >/dev/null || die "no .debs in $deps/debs: run 'tools/gpu-deps.sh download' first"
  rm -rf "$deps/root"
  mkdir -p "$deps/root"
  local deb
  for deb in "$deps"/debs/*.deb; do unpack_one "$deb"; done
  [[ -f $deps/root/usr/include/spdlog/spdlog.h && -d $deps/root/usr/include/boost/asio ]] ||
    die "unpacked tree in $deps/root lacks spdlog or Boost headers"
  echo "$deps/root/usr"
}

case ${1:-} in
  download) download ;;
  unpack) unpack ;;
  prefix) echo "$deps/root/usr" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
