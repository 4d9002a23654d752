#!/usr/bin/env bash
# Malformed textual IR (tests/passes/ir/errors/*.ir) is refused with a located error, never a
# crash: ir_opt must exit 1 and print exactly <case>.err (`file:line:col: error: ...`, the line,
# a caret). `ir_errors.sh IR_OPT update` rewrites the .err files (scripts/update-golden.sh).
set -euo pipefail
opt=$(realpath "$1")
mode=${2:-check}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
n=0
for f in tests/passes/ir/errors/*.ir; do
  n=$((n + 1))
  set +e
  "$opt" "$f" >/dev/null 2>"$tmp/err"
  rc=$?
  set -e
  if [ $rc != 1 ]; then
    echo "FAILED: $f: exit status $rc, expected 1"
    cat "$tmp/err"
    fail=1
    continue
  fi
  if [ "$mode" = update ]; then
    cp "$tmp/err" "${f%.ir}.err"
  elif ! diff -u "${f%.ir}.err" "$tmp/err"; then
    echo "FAILED: $f: the error differs from ${f%.ir}.err"
    fail=1
  fi
done
[ $fail = 0 ] && echo "ir errors: $n malformed inputs refused with the expected diagnostics"
exit $fail
