#!/usr/bin/env bash
# Inputs that once crashed the compiler (fuzzer finds): each must compile (exit 0) or be
# rejected with a diagnostic (exit 1) — never abort. `expect` lines: "# expect: 0" or "# expect: 1".
set -u
shardc=$1
dir=$(dirname "$0")
status=0
for f in "$dir"/*.model; do
  want=$(sed -n 's/^# expect: \([01]\)$/\1/p' "$f")
  "$shardc" plan "$f" >/dev/null 2>"$f.err.tmp"
  rc=$?
  if [ "$rc" != "${want:-0}" ]; then
    echo "FAIL: $f: exit $rc, want ${want:-0}"; cat "$f.err.tmp"; status=1
  fi
  rm -f "$f.err.tmp"
done
exit $status
