#!/usr/bin/env bash
# Downloads the four MNIST .gz files into DEST_DIR (default: <repo>/data/mnist) from $MNIST_MIRROR
# (default: https://ossci-datasets.s3.amazonaws.com/mnist, the mirror torchvision uses) and checks
# each against its known MD5 (torchvision's list). A file already present with the right MD5 is
# skipped; a download goes to a temp file in DEST_DIR and is renamed into place only once its MD5
# matches. On success DEST_DIR/MD5SUMS is rewritten. A download error or a mismatch exits 1.
# MNIST_MD5SUMS_FILE: a file in md5sum format whose checksums replace the built-in ones (for
# mirrors with other content, and for tests); it must list all four files.
# Usage: tools/get-mnist.sh [DEST_DIR]
set -euo pipefail

dest=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/data/mnist}
mirror=${MNIST_MIRROR:-https://ossci-datasets.s3.amazonaws.com/mnist}
mirror=${mirror%/}
files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
declare -A md5=(
  [train-images-idx3-ubyte.gz]=f68b3c2dcbeaaa9fbdd348bbdeb94873
  [train-labels-idx1-ubyte.gz]=d53e105ee54ea40749a09fcbcd1e9432
  [t10k-images-idx3-ubyte.gz]=9fb629c4189551a2d022fa330f9573f3
  [t10k-labels-idx1-ubyte.gz]=ec29112dd5afa0611ce80d1b7f02629c
)

die() { echo "get-mnist: $*" >&2; exit 1; }
md5of() { local s; s=$(md5sum <"$1"); echo "${s%% *}"; }

if [[ -n ${MNIST_MD5SUMS_FILE:-} ]]; then
  [[ -r $MNIST_MD5SUMS_FILE ]] || die "cannot read MNIST_MD5SUMS_FILE=$MNIST_MD5SUMS_FILE"
  md5=()
  while read -r sum name || [[ -n ${sum:-} ]]; do
    if [[ $sum =~ ^[0-9a-fA-F]{32}$ ]]; then md5[${name#\*}]=${sum,,}; fi
  done <"$MNIST_MD5SUMS_FILE"
  for f in "${files[@]}"; do [[ -n ${md5[$f]:-} ]] || die "$f: no checksum in $MNIST_MD5SUMS_FILE"; done
fi

mkdir -p "$dest"
tmp=
trap 'rm -f "$tmp"' EXIT
trap 'exit 130' INT TERM

fetched=0 skipped=0
for f in "${files[@]}"; do
  want=${md5[$f]} url=$mirror/$f
  if [[ -f $dest/$f && $(md5of "$dest/$f") == "$want" ]]; then
    echo "get-mnist: $f: present, MD5 OK, skipped"
    skipped=$((skipped + 1))
    continue
  fi
  tmp=$(mktemp "$dest/.$f.XXXXXX")
  if ! err=$(curl -sS --fail --location --connect-timeout 15 --max-time 600 --retry 3 --retry-delay 2 \
    -o "$tmp" "$url" 2>&1); then
    die "$f: download failed from $url: ${err##*$'\n'}"
  fi
  got=$(md5of "$tmp")
  [[ $got == "$want" ]] || die "$f: MD5 mismatch for $url: expected $want, got $got"
  chmod 644 "$tmp" # mktemp creates it 0600
  mv -f "$tmp" "$dest/$f"
  tmp=
  echo "get-mnist: $f: downloaded, MD5 OK"
  fetched=$((fetched + 1))
done

for f in "${files[@]}"; do echo "${md5[$f]}  $f"; done >"$dest/MD5SUMS"
echo "get-mnist: ${#files[@]} files OK in $dest ($fetched downloaded, $skipped already present)"
