#!/usr/bin/env bash
# Activation recompute (passes/recompute.c) on the CPU target: memory and step time of
# `recompute none | selective | full` on one model, one binary per mode, rounds interleaved so
# machine noise hits every mode alike.
#   bench/recompute.sh [SHARDC] [STEPS] [ROUNDS]
# Model: the tiny GPT widened (d=256, 6 layers, seq 256, 4 heads: 4.8 M parameters), micro-batch 8,
# one rank, 1 thread. Per mode: the memory plan's activations and peak (`shardc plan`), the
# trainer's planned allocation and its measured peak resident memory (VmHWM, "memory at end"),
# and per round the median step time (the first step excluded). Losses are bit-identical across
# modes (tests/codegen/recompute.sh asserts it; here the last loss is printed).
set -euo pipefail
cd "$(dirname "$0")/.."
shardc=${1:-build/shardc}
steps=${2:-10}
rounds=${3:-3}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
bash scripts/gen_corpus.sh "$t/data.txt" 400000 3 >/dev/null
m=(models/tiny.model -D d=256 -D layers=6 -D seq=256 -D micro_batch=8 --world 1)
run=(--data "$t/data.txt" --steps "$steps" --eval-every 0 --val-batches 1 --threads 1)
median() { sort -g | awk '{ a[n++] = $1 } END { print n % 2 ? a[(n - 1) / 2] : (a[n / 2 - 1] + a[n / 2]) / 2 }'; }
echo "nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg), $steps steps (first excluded)"
printf '%-10s %16s %12s %16s %18s\n' mode "plan activations" "plan peak" "trainer planned" "trainer VmHWM"
for mode in none selective full; do
  "$shardc" build "${m[@]}" -D recompute=$mode -o "$t/$mode" >/dev/null 2>&1
  "$shardc" plan "${m[@]}" -D recompute=$mode --bytes 2>/dev/null >"$t/$mode.plan"
  act=$(awk '/^#   activations/ { print $5 }' "$t/$mode.plan")
  peak=$(awk '/^#   peak/ { print $5 }' "$t/$mode.plan")
  "$t/$mode" "${run[@]}" --steps 2 >"$t/$mode.out" 2>&1
  planned=$(grep -m1 -o 'memory at end: planned [0-9.]* MiB' "$t/$mode.out" | awk '{ print $5 }')
  hwm=$(grep -m1 -o 'measured peak resident [0-9.]* MiB' "$t/$mode.out" | awk '{ print $4 }')
  printf '%-10s %12s MiB %8s MiB %12s MiB %14s MiB\n' "$mode" "$act" "$peak" "$planned" "$hwm"
done
printf '%-6s %-10s %9s %12s\n' round mode ms/step "last loss"
for r in $(seq 1 "$rounds"); do
  for mode in none selective full; do
    "$t/$mode" "${run[@]}" --log "$t/$mode.jsonl" >/dev/null 2>&1
    ms=$(grep -o '"ms":[^,]*' "$t/$mode.jsonl" | cut -d: -f2 | tail -n +2 | median)
    loss=$(grep -o '"loss":[^,]*' "$t/$mode.jsonl" | cut -d: -f2 | tail -1)
    printf '%-6s %-10s %9.1f %12s\n' "$r" "$mode" "$ms" "$loss"
  done
done
