#!/usr/bin/env bash
# Writes launcher/function_order.txt: the text section of every function a ddprun agent runs in a two-node job (its
# start, the rendezvous as the store's host and as another node, one worker started and exited, the exit barrier),
# in the order the functions first ran, which the link of ddprun follows (launcher/CMakeLists.txt,
# DDPRUN_ORDER_FUNCTIONS). Why: each process pays for every page of code it touches (a page fault, and on this VM a
# shadow page table fill too); spread through the 4.5 MB text in link order, an agent's code lay on 552 pages in 64 of
# its 70 64-KiB windows; listed in no particular order, on 340 pages in 37; in the order they first run, the code an
# agent runs until it waits in a rendezvous comes first and together (docs/benchmarks.md). Run it after changes to
# what an agent runs at start or in a rendezvous; a list that has gone stale still links, it only packs less.
# Needs valgrind (lackey), objdump, nm and a build of this tree (tools/build.sh).
# Usage: tools/function_order.sh            regenerate the list from build/bin/ddprun
#        tools/function_order.sh --check    fail if under 80% of the listed sections are still in ddprun's link inputs
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
list=$root/launcher/function_order.txt
mode=${1:-}
case $mode in
  "" | --check) ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "$0: unknown argument '$mode' (see --help)" >&2; exit 2 ;;
esac
link=$build/launcher/CMakeFiles/ddprun.dir/link.txt
[[ -f $link ]] || { echo "$0: $link: no build of ddprun (tools/build.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Every object and archive ddprun is linked from: the build's own (relative to build/launcher) and the toolchain's.
inputs=()
for word in $(cat "$link"); do
  [[ $word == *.o || $word == *.a ]] && inputs+=("$build/launcher/$word")
done
for lib in libstdc++.a libgcc.a libgcc_eh.a libc.a; do
  path=$(c++ -print-file-name="$lib")
  [[ -f $path ]] && inputs+=("$path")
done
# symbol -> the section it lives in (with -ffunction-sections, .text.<mangled name>; a constructor's C1 lives in
# its C2's section, a clone in its origin's).
for input in "${inputs[@]}"; do objdump -t "$input" 2>/dev/null || true; done |
  awk 'NF >= 5 && $NF !~ /:$/ { for (i = 1; i <= NF; i++) if ($i ~ /^\.text/) { print $NF, $i; break } }' |
  sort -u >"$tmp/sections"
# main has a section of its own only with -ffunction-sections (inline functions always have theirs).
grep -qE '^main \.text(\.startup)?\.main$' "$tmp/sections" || {
  echo "$0: $build was built without a section per function (configure with -DDDPRUN_ORDER_FUNCTIONS=ON)" >&2
  exit 1
}

if [[ $mode == --check ]]; then
  read -r present total < <(awk 'NR == FNR { have[$2] = 1; next } /^#/ || NF == 0 { next }
                                 { total++; if ($1 in have) present++ } END { print present + 0, total + 0 }' \
                             "$tmp/sections" "$list")
  echo "$present of $total listed sections are in ddprun's link inputs"
  ((total > 0 && present * 100 >= total * 80)) || {
    echo "$0: launcher/function_order.txt has gone stale: run tools/function_order.sh" >&2
    exit 1
  }
  # And the link placed them side by side: the 64-KiB windows of ddprun's text that the listed functions occupy,
  # against the fewest their size needs (in link order they spread over nearly all of the text).
  read -r windows needed < <(nm -S "$build/bin/ddprun" | /usr/bin/python3 -c '
import sys
listed = {line.strip() for line in open(sys.argv[1]) if line.strip() and not line.startswith("#")}
mine = {symbol for symbol, section in (line.split() for line in open(sys.argv[2])) if section in listed}
used, size_sum = set(), 0
for fields in (line.split() for line in sys.stdin):
    if len(fields) == 4 and fields[2] in "tTwW" and fields[3] in mine:
        start, size = int(fields[0], 16), int(fields[1], 16)
        size_sum += size
        used.update(range(start >> 16, ((start + size) >> 16) + 1))
print(len(used), size_sum // 65536 + 1)' "$list" "$tmp/sections")
  echo "the listed functions lie in $windows 64-KiB windows of ddprun's text (their size needs $needed)"
  ((windows <= 2 * needed + 4)) || {
    echo "$0: build/bin/ddprun was not linked in launcher/function_order.txt's order" >&2
    exit 1
  }
  exit 0
fi

command -v valgrind >/dev/null || { echo "$0: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
ddprun=$build/bin/ddprun
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
job=(--nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id order-$$ --no-python)
export TMPDIR=$tmp
# Every superblock each agent enters, in order (lackey's trace: "SB <address>"), none of them continued into a
# function it calls or jumps to (no chasing), so that every function entered starts one.
grind() {
  valgrind --tool=lackey --trace-superblocks=yes --vex-guest-chase=no --log-file="$tmp/$1.sb" "$ddprun" "${job[@]}" "${@:2}"
}
grind host true >"$tmp/host.log" 2>&1 &
host=$!
trap 'kill -KILL "$host" 2>/dev/null || true; rm -rf "$tmp"' EXIT
grind node --local-addr 127.0.0.2 true >"$tmp/node.log" 2>&1 || true  # judged by the logs below
wait "$host" || true
for agent in host node; do
  grep -q "all workers exited 0" "$tmp/$agent.log" || {
    echo "$0: the two-node job failed; its $agent's last lines:" >&2
    tail -3 "$tmp/$agent.log" >&2
    exit 1
  }
done
# Every function either agent ran, in the order it first ran: the other node's first (its start and its wait in the
# rendezvous, then its worker and its exit), then what only the store's host ran; the cold parts GCC splits off
# (.text.unlikely) and the sections that hold a whole object's code (.text) stay where they are.
nm -S --defined-only "$ddprun" | /usr/bin/python3 -c '
import bisect, sys
symbols = sorted((int(f[0], 16), int(f[1], 16), f[3]) for f in (line.split() for line in sys.stdin)
                 if len(f) == 4 and f[2] in "tTwW")
starts = [s[0] for s in symbols]
seen = set()
for trace in sys.argv[1:]:
    for line in open(trace):
        if not line.startswith("SB "):
            continue
        address = int(line.split()[1], 16)
        i = bisect.bisect_right(starts, address) - 1
        if i < 0 or address >= symbols[i][0] + max(symbols[i][1], 1):
            continue
        name = symbols[i][2]
        if name not in seen:
            seen.add(name)
            print(name)' "$tmp/node.sb" "$tmp/host.sb" >"$tmp/functions"
{
  echo "# Generated by tools/function_order.sh: the sections ddprun's link places first (see that script)."
  awk 'NR == FNR { section[$1] = section[$1] " " $2; next }
       ($1 in section) { n = split(section[$1], s, " ");
         for (i = 1; i <= n; i++) if (s[i] != ".text" && s[i] !~ /^\.text\.unlikely/ && !done[s[i]]++) print s[i] }' \
    "$tmp/sections" "$tmp/functions"
} >"$list"
echo "$(($(wc -l <"$list") - 1)) sections written to launcher/function_order.txt"
