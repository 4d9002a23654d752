#!/usr/bin/env bash
# Golden files of the compiler's output. `golden.sh SHARDC check` compares, `golden.sh SHARDC update`
# rewrites (scripts/update-golden.sh). Runs from the repository root so paths print the same.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
mode=${2:-check}
dir=tests/golden
# shellcheck source=tests/golden/cases.sh
source tests/golden/cases.sh
for c in "${golden_cases[@]}"; do
  IFS='|' read -r name model flags <<<"$c"
  # shellcheck disable=SC2086
  # a plan that does not fit its devices (gpt3-175b today) prints itself, then exits 1: its
  # status and error are tests/report/fit.sh's; --ir: the plan with the program's IR
  "$shardc" plan "$model" $flags --ir >"$t/$name.ir" 2>/dev/null || true
done
# the C kernels' program (--cpu-kernels c): the default LLVM kernels are an object file, not C
"$shardc" build models/tiny.model --world 1 --cpu-kernels c --emit-c "$t/c" -o "$t/train_tiny" >/dev/null 2>&1
cp "$t/c/tiny.c" "$t/tiny.c"
# the CUDA target's host program and kernels (bf16 mixed precision), written without compiling
"$shardc" plan models/tiny.model --world 1 --target cuda -D precision=bf16 --emit-c "$t/cu" >/dev/null 2>&1
cp "$t/cu/tiny.c" "$t/tiny-cuda.c"

status=0
for f in "$t"/*.ir "$t"/tiny.c "$t"/tiny-cuda.c; do
  base=$(basename "$f")
  if [ "$mode" = update ]; then
    cp "$f" "$dir/$base"
  elif ! diff -u "$dir/$base" "$f" >"$t/diff" 2>&1; then
    echo "golden mismatch: $dir/$base (refresh with scripts/update-golden.sh after checking the change)"
    head -40 "$t/diff"
    status=1
  fi
done
[ "$mode" = update ] && echo "updated $(ls "$t"/*.ir "$t"/tiny.c "$t"/tiny-cuda.c | wc -l) golden files in $dir"
exit $status
