# Sourced by benchmark scripts as `source "$root/tools/bench/out_arg.sh" "$@"`: reads their one optional
# argument, `--out FILE` (also write the Markdown result to FILE), into $out; `--help` prints the script's
# header comment; anything else is one line naming it, exit 2.
out=""
case ${1:-} in
  --out) out=${2:?--out needs a file} ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "$0: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac
