#!/usr/bin/env bash
# tests/report/plan_ir.sh — `shardc plan` prints the plan's reports without the program's IR; `--ir`
# (or --dump-ir) prints the IR in its place, as `plan` did before --ir existed.
#   1. Every golden case (tests/golden/cases.sh, whose NAME.ir is `plan --ir`): the default output
#      has no IR line (no `%N : ... = op(...)`, no `graph {`, no `results:`), has the reports
#      (parameters, FLOPs per token, communication, memory), and equals the golden with its graph
#      and results replaced by the one line `# the program's IR: N nodes (shardc plan --ir prints it)`,
#      N the golden's node lines (yield and closing braces are not nodes).
#   2. A pipeline (tiny, pp 2 interleaved, --cost): the same against its `plan --ir`; --dump-ir
#      prints what --ir does.
#   3. --ir where there is no plan to print it in (--search, --compare, --dump-ir=after:PASS, build
#      without --dump-ir) is refused.
#   4. --world past the topology's devices: the topology line's note (below).
# Usage: tests/report/plan_ir.sh SHARDC
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
status=0
bad() { echo "FAIL: $*"; status=1; }
# The default output expected from a `plan --ir` text: the graph (from `graph {` to its closing `}`)
# and the results block after it become the note line.
strip_ir() {
  awk '/^graph \{$/ { g = 1; n = 0; next }
       g && /^\}$/ { g = 0; r = 1; printf "# the program'"'"'s IR: %d nodes (shardc plan --ir prints it)\n", n; next }
       g { if ($0 !~ /^ *yield( |$)/ && $0 !~ /^ *\}$/) n++; next }
       r && /^results:$/ { next }
       r && /^  [^ ].* = %-?[0-9]+$/ { next }
       { r = 0; print }' "$1"
}
# The default output: no IR, the reports present, and the --ir text less its IR.
check() { # NAME PLAN-FILE IR-FILE
  local name=$1 plan=$2 ir=$3
  if grep -Eq '^ *(%[0-9]+ : |graph \{$|results:$|yield( |$))|= matmul\(' "$plan"; then
    bad "$name: IR lines in the default plan output: $(grep -Em2 '^ *%[0-9]+ : |graph \{$|= matmul\(' "$plan")"
  fi
  for want in '^module ' '^  plan: ' '^parameters:$' '^flops per token: forward ' '^# communication per rank' \
    '^# memory per rank' "^# the program's IR: [1-9][0-9]* nodes \(shardc plan --ir prints it\)$"; do
    grep -Eq "$want" "$plan" || bad "$name: no line /$want/ in the default plan output"
  done
  grep -q '^graph {$' "$ir" && grep -q '= matmul(' "$ir" || bad "$name: no graph with matmuls in the --ir output"
  strip_ir "$ir" >"$t/want"
  if ! cmp -s "$t/want" "$plan"; then
    bad "$name: the default plan output is not the --ir output less its IR"
    diff "$t/want" "$plan" | head -20 || true
  fi
}

# shellcheck source=tests/golden/cases.sh
source tests/golden/cases.sh
for c in "${golden_cases[@]}"; do
  IFS='|' read -r name model flags <<<"$c"
  # shellcheck disable=SC2086
  # (a plan that does not fit exits 1 after printing itself: tests/report/fit.sh)
  "$shardc" plan "$model" $flags >"$t/$name.plan" 2>/dev/null || true
  check "$name" "$t/$name.plan" "tests/golden/$name.ir"
done

# 4. --world past the topology's devices (tiny's cpu topology: 1 node x 2): the header says how many
#    nodes like it the plan fills; a world inside it says nothing more
"$shardc" plan models/tiny.model -D seq=32 -D micro_batch=4 -D dp=4 --world 4 >"$t/w4.plan" 2>/dev/null
grep -q '^  topology cpu: 1 node x 2 cpu ranks.*  # planned on 2 nodes like it: --world 4$' "$t/w4.plan" ||
  bad "--world 4 on 1 node x 2: no '# planned on 2 nodes like it' on the topology line: $(grep -m1 topology "$t/w4.plan")"
"$shardc" plan models/tiny.model --world 2 >"$t/w2.plan" 2>/dev/null
grep -q 'planned on' "$t/w2.plan" && bad "--world 2 on 1 node x 2: a 'planned on' note: $(grep -m1 topology "$t/w2.plan")"

pp=(models/tiny.model -D layers=4 -D micro_batch=2 -D batch=8 -D dp=1 -D pp=2 -D schedule=interleaved --world 2 --cost)
"$shardc" plan "${pp[@]}" >"$t/pp.plan" 2>/dev/null || bad "plan ${pp[*]} failed"
"$shardc" plan "${pp[@]}" --ir >"$t/pp.ir" 2>/dev/null || bad "plan ${pp[*]} --ir failed"
"$shardc" plan "${pp[@]}" --dump-ir >"$t/pp.dump" 2>/dev/null || bad "plan ${pp[*]} --dump-ir failed"
check "tiny pp2 interleaved" "$t/pp.plan" "$t/pp.ir"
cmp -s "$t/pp.ir" "$t/pp.dump" || bad "tiny pp2 interleaved: --dump-ir prints other than plan --ir"
grep -q '^# pipeline: 2 stages' "$t/pp.plan" && grep -q '^#   step ' "$t/pp.plan" ||
  bad "tiny pp2 interleaved: no pipeline section or predicted step in the default plan output"

for args in "plan models/tiny.model --ir --search" "plan models/tiny.model --ir --compare zero=0,1" \
  "plan models/tiny.model --ir --dump-ir=after:shard" "build models/tiny.model --ir -o $t/never"; do
  # shellcheck disable=SC2086
  expect_shardc 1 "error: --ir prints the program's IR in \`shardc plan\`'s output" -- $args || true
done
[ -e "$t/never" ] && bad "build --ir wrote a trainer"

[ $status = 0 ] && echo "plan: ${#golden_cases[@]} golden cases and a pipeline print their reports without the IR, and the IR with --ir"
exit $status
