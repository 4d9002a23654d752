#!/usr/bin/env bash
# The IR verifier's cost in one compile, two shardc side by side: BASE and NEW alternated N times
# each on `shardc ARGS... --time-passes`; prints per run the verifier's total (the last `ir_verify`
# line: after every pass, and for a shardc from 2026-11-27 on the final full verification, shown
# apart), the wall and user seconds of the whole command (/usr/bin/time) and the load.
#   bench/verify_cost.sh BASE NEW N ARGS...
# e.g. bench/verify_cost.sh /tmp/shardc-main build/shardc 2 plan models/llama3-8b.model -D pp=4 -D batch=1024 --world 32
set -uo pipefail
[ $# -ge 4 ] || { echo "usage: $0 BASE NEW N ARGS..." >&2; exit 2; }
base=$1 new=$2 n=$3
shift 3
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
for _ in $(seq "$n"); do
  for which in base new; do
    bin=$base
    [ "$which" = new ] && bin=$new
    /usr/bin/time -f "%e %U" -o "$t/time" "$bin" "$@" --time-passes >/dev/null 2>"$t/err"
    v=$(grep -E "^shardc: ir_verify +[0-9]" "$t/err" | awk '{print $3}')
    fin=$(grep -E "^shardc: ir_verify final" "$t/err" | awk '{print $4}')
    echo "$which verifier ${v:-?} ms (final ${fin:--} ms)  wall/user $(tr ' ' / <"$t/time") s  load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
