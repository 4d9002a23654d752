#!/usr/bin/env bash
# Golden files of the compiler's output. `golden.sh SHARDC check` compares, `golden.sh SHARDC update`
# rewrites (scripts/update-golden.sh). Runs from the repository root so paths print the same.
set -euo pipefail
shardc=$(realpath "$1")
mode=${2:-check}
cd "$(dirname "$0")/../.."
dir=tests/golden
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cases=(
  "tiny|models/tiny.model"
  "gpt2-124m|models/gpt2-124m.model"
  "gpt2-124m-tp8|models/gpt2-124m.model|-D tp=8"
  "gpt2-124m-dp4-tp8|models/gpt2-124m.model|-D tp=8 --topology models/topo/p4d-x4.topo"
  "llama3-8b|models/llama3-8b.model"
  "gpt3-175b|models/gpt3-175b.model"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name model flags <<<"$c"
  # shellcheck disable=SC2086
  # a plan that does not fit its devices (gpt3-175b today) prints itself, then exits 1: its
  # status and error are tests/report/fit.sh's
  "$shardc" plan "$model" $flags >"$tmp/$name.ir" 2>/dev/null || true
done
# the C kernels' program (--cpu-kernels c): the default LLVM kernels are an object file, not C
"$shardc" build models/tiny.model --world 1 --cpu-kernels c --emit-c "$tmp/c" -o "$tmp/train_tiny" >/dev/null 2>&1
cp "$tmp/c/tiny.c" "$tmp/tiny.c"
# the CUDA target's host program and kernels (bf16 mixed precision), written without compiling
"$shardc" plan models/tiny.model --world 1 --target cuda -D precision=bf16 --emit-c "$tmp/cu" >/dev/null 2>&1
cp "$tmp/cu/tiny.c" "$tmp/tiny-cuda.c"

status=0
for f in "$tmp"/*.ir "$tmp"/tiny.c "$tmp"/tiny-cuda.c; do
  base=$(basename "$f")
  if [ "$mode" = update ]; then
    cp "$f" "$dir/$base"
  elif ! diff -u "$dir/$base" "$f" >"$tmp/diff" 2>&1; then
    echo "golden mismatch: $dir/$base (refresh with scripts/update-golden.sh after checking the change)"
    head -40 "$tmp/diff"
    status=1
  fi
done
[ "$mode" = update ] && echo "updated $(ls "$tmp"/*.ir "$tmp"/tiny.c "$tmp"/tiny-cuda.c | wc -l) golden files in $dir"
exit $status
