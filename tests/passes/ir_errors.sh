#!/usr/bin/env bash
# Malformed textual IR (tests/passes/ir/errors/*.ir) is refused with a located error, never a
# crash: ir_opt must exit 1 and print exactly <case>.err (`file:line:col: error: ...`, the line,
# a caret). `ir_errors.sh IR_OPT update` rewrites the .err files (scripts/update-golden.sh).
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
opt=$(abspath "$1")
mode=${2:-check}
status=0
n=0
for f in tests/passes/ir/errors/*.ir; do
  n=$((n + 1))
  set +e
  "$opt" "$f" >/dev/null 2>"$t/err"
  rc=$?
  set -e
  if [ $rc != 1 ]; then
    echo "FAILED: $f: exit status $rc, expected 1"
    cat "$t/err"
    status=1
    continue
  fi
  if [ "$mode" = update ]; then
    cp "$t/err" "${f%.ir}.err"
  elif ! diff -u "${f%.ir}.err" "$t/err"; then
    echo "FAILED: $f: the error differs from ${f%.ir}.err"
    status=1
  fi
done
[ $status = 0 ] && echo "ir errors: $n malformed inputs refused with the expected diagnostics"
exit $status
