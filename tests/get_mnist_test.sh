#!/usr/bin/env bash
# Tests tools/get-mnist.sh offline against fake mirrors served on loopback by python's http.server:
# (a) good mirror, (b) idempotent rerun, (c) corrupted file, (d) missing file (404), (e) unreachable.
# Mirror content: the gzip files in data/mnist/, with t10k-images standing in for train-images.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
script=$root/tools/get-mnist.sh
work=$(mktemp -d)
server=
cleanup() { if [[ -n $server ]]; then kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; fi; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

pass=0 fail=0
check() { # check DESCRIPTION COMMAND...
  if "${@:2}"; then pass=$((pass + 1)); echo "PASS: $1"; else
    fail=$((fail + 1)); echo "FAIL: $1 (rc=$rc)"; sed 's/^/  | /' "$work/out" "$work/err"
  fi
}
run() { # run MIRROR_SUBDIR DEST: runs the script; sets rc, output in $work/out and $work/err
  MNIST_MIRROR=http://127.0.0.1:$port/$1 MNIST_MD5SUMS_FILE=$work/sums \
    timeout 60 "$script" "$2" >"$work/out" 2>"$work/err"
  rc=$?
}
no_temp() { [[ -z $(find "$1" -name '.*' -type f) ]]; }
gets() { grep -c '"GET /good/.*\.gz' "$work/server.log"; }
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Fake mirrors: good/ (all four), bad/ (train-labels corrupted), missing/ (no t10k-images).
for d in good bad missing; do
  mkdir -p "$work/www/$d"
  cp "$root"/data/mnist/{t10k-images-idx3-ubyte.gz,t10k-labels-idx1-ubyte.gz,train-labels-idx1-ubyte.gz} "$work/www/$d/"
  cp "$root/data/mnist/t10k-images-idx3-ubyte.gz" "$work/www/$d/train-images-idx3-ubyte.gz"
done
(cd "$work/www/good" && md5sum ./*.gz | sed 's| \./| |') >"$work/sums"
printf 'x' >>"$work/www/bad/train-labels-idx1-ubyte.gz"
rm "$work/www/missing/t10k-images-idx3-ubyte.gz"

port=$(free_port)
/usr/bin/python3 -m http.server --bind 127.0.0.1 "$port" --directory "$work/www" >"$work/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/" && break; sleep 0.1; done
curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/" || { echo "http.server did not start"; exit 1; }

# (a) good mirror
dest=$work/a
run good "$dest"
check "(a) exit 0" test "$rc" -eq 0
check "(a) all four files match the mirror" diff -rq --exclude=MD5SUMS "$work/www/good" "$dest"
check "(a) MD5SUMS written and valid" bash -c "cd '$dest' && diff <(sort '$work/sums') <(sort MD5SUMS) && md5sum -c --quiet MD5SUMS"
check "(a) summary line" grep -q '4 files OK.*4 downloaded' "$work/out"

# (b) rerun: nothing fetched
before=$(gets)
run good "$dest"
check "(b) exit 0" test "$rc" -eq 0
check "(b) no new GETs" test "$(gets)" -eq "$before"
check "(b) all skipped" grep -q '0 downloaded, 4 already present' "$work/out"

# (c) corrupted train-labels
dest=$work/c
run bad "$dest"
check "(c) exit 1" test "$rc" -eq 1
check "(c) error names file and MD5" grep -q 'train-labels-idx1-ubyte.gz: MD5 mismatch.*expected' "$work/err"
check "(c) no file under final name" test ! -e "$dest/train-labels-idx1-ubyte.gz"
check "(c) no temp files left" no_temp "$dest"

# (d) missing t10k-images (404)
dest=$work/d
run missing "$dest"
check "(d) exit 1" test "$rc" -eq 1
check "(d) error names file" grep -q 't10k-images-idx3-ubyte.gz: download failed.*404' "$work/err"
check "(d) no file under final name" test ! -e "$dest/t10k-images-idx3-ubyte.gz"
check "(d) no temp files left" no_temp "$dest"

# (e) unreachable mirror: a closed loopback port
dest=$work/e
port=$(free_port) # nothing listens here
start=$SECONDS
run good "$dest"
check "(e) exit 1" test "$rc" -eq 1
check "(e) fails within 20 s" test $((SECONDS - start)) -lt 20
check "(e) error names file" grep -q 'train-images-idx3-ubyte.gz: download failed' "$work/err"

echo "$pass passed, $fail failed"
((fail == 0))
