#!/usr/bin/env bash
# Gradient accumulation's memory on 1 CPU rank: the planned peak and the trainer's measured peak
# resident memory (VmHWM) of the same model with the global batch as one micro-batch (accum 1) and
# as 4 micro-steps (accum 4), for each compiler given (e.g. before and after a memplan change).
#   bench/accum_mem.sh [STEPS] SHARDC...
# Model: the tiny GPT widened (d=256, 6 layers, seq 128: 4.8 M parameters, 18.45 MiB of f32
# parameters), global batch 8, AdamW. accum 1: micro-batch 8; accum 4: micro-batch 2.
# The planned saving of a change is its planned peak difference; the measured one is VmHWM's (the
# trainer's whole resident size: runtime, libraries and kernel scratch included).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-5}
shift
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
bash scripts/gen_corpus.sh "$t/data.txt" 200000 3 >/dev/null
m=(models/tiny.model -D d=256 -D layers=6 -D seq=128 -D batch=8 --world 1)
run=(--data "$t/data.txt" --steps "$steps" --eval-every 0 --val-batches 1 --threads 1)
plan_field() { grep -E "^# +$2 +[0-9]+ B" "$1" | awk '{ printf "%.2f", $3 / 1048576 }'; }
echo "nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg), $steps steps"
printf '%-3s %-40s %6s %9s %9s %9s %9s\n' n shardc accum grads_MiB act_MiB peak_MiB VmHWM_MiB
i=0
for s in "$@"; do
  i=$((i + 1))
  for mb in 8 2; do
    "$s" plan "${m[@]}" -D micro_batch=$mb >"$t/plan" 2>&1
    "$s" build "${m[@]}" -D micro_batch=$mb -o "$t/tr" >/dev/null 2>&1
    (cd "$t" && "$t/tr" "${run[@]}" >"$t/out" 2>&1)
    hwm=$(grep -o 'measured peak resident [0-9.]* MiB' "$t/out" | tail -1 | awk '{ print $4 }')
    printf '%-3s %-40s %6s %9s %9s %9s %9s\n' "$i" "$s" $((8 / mb)) "$(plan_field "$t/plan" gradients)" \
      "$(plan_field "$t/plan" activations)" "$(plan_field "$t/plan" peak)" "$hwm"
  done
done
