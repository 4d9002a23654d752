#!/usr/bin/env bash
# IR-file pass tests: for every tests/passes/ir/<pass>/<case>.before.ir, `ir_opt <case>.before.ir
# --pass <pass>` must print <case>.expected.ir exactly. <pass> is a name from
# pipeline_pass_names() (passes/pipeline.c). A before file's `# ir_opt: ARGS` line adds options
# (--world N, --target cuda). `ir_cases.sh IR_OPT update` rewrites the expected files
# (scripts/update-golden.sh): read the diff before committing it.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
opt=$(abspath "$1")
mode=${2:-check}
status=0
n=0
for before in tests/passes/ir/*/*.before.ir; do
  pass=$(basename "$(dirname "$before")")
  expected=${before%.before.ir}.expected.ir
  read -r -a args <<<"$(sed -n 's/^# ir_opt: //p' "$before" | head -1)"
  n=$((n + 1))
  if ! "$opt" "$before" --pass "$pass" "${args[@]}" >"$t/got" 2>"$t/err"; then
    echo "FAILED: $before: ir_opt --pass $pass ${args[*]} failed"
    cat "$t/err"
    status=1
  elif [ "$mode" = update ]; then
    cp "$t/got" "$expected"
  elif ! diff -u "$expected" "$t/got"; then
    echo "FAILED: $before: pass $pass printed something else than $expected"
    status=1
  fi
done
[ $status = 0 ] && echo "ir pass cases: $n cases, each pass's output as expected"
exit $status
