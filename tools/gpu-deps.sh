#!/usr/bin/env bash
# The build's non-LibTorch dependencies for a machine that reaches no package registry (the GPU machine):
# spdlog, fmt, CLI11, nlohmann-json, Boost headers + Boost.Filesystem, zlib and GoogleTest, as Debian 12
# packages. LibTorch itself comes from that machine's pip torch, and Gloo's headers with it where the wheel
# ships them (Debian's libgloo-dev is older than any torch 2.x's Gloo, so it is not offered as a stand-in;
# without them the worker builds for NCCL alone).
#
#   tools/gpu-deps.sh download   here, with Debian's mirror: `apt-get download` the .debs into .gpu-deps/debs
#                                (about 12 MB), and Fashion-MNIST (60k/10k, 30 MB, from Debian's
#                                dataset-fashion-mnist) into .gpu-deps/fashion-mnist for a timing that is
#                                longer than the carried 9k-image MNIST sample. .gpu-deps/ is git-ignored:
#                                carry .gpu-deps/debs and .gpu-deps/fashion-mnist to the GPU machine
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
# GPU_DEPS_DIR overrides .gpu-deps; FASHION_MNIST_DIR the installed data set's folder.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps=${GPU_DEPS_DIR:-$root/.gpu-deps}
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
