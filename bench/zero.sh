#!/usr/bin/env bash
# ZeRO stages on 2 CPU ranks (dp=2): memory per rank and step time of zero 0, 1, 2 and 3 on the same
# model and work (passes/zero.c).
#   bench/zero.sh [SHARDC] [STEPS] [ROUNDS] [DEFINES]
# DEFINES: more -D settings appended to the model's (e.g. "-D seq=32 -D micro_batch=1": activations
# small next to the parameters, so the step's peak is the optimizer's, where ZeRO-1/2's parameter
# all-gather lands in the parameter's own storage).
# Model: the tiny GPT widened (d=256, 6 layers, seq 128: 4.8 M parameters, 18.3 MiB of f32
# gradients, 36.6 MiB of Adam moments), micro-batch 2 per rank, AdamW, as bench/dp_overlap.sh.
# Per stage: the memory plan per rank (`shardc plan`: parameters, gradients, optimizer state,
# planned peak), then per round (stages interleaved so machine noise hits each alike) rank 0's
# median step time and exposed communication (the first step excluded) and the trainer's measured
# peak resident memory (VmHWM, which includes the runtime's own buffers and the libraries): at
# start (the plan's allocation and the kernels' workspace made and touched, before the first step:
# what the plan predicts) and at end (the run's peak: also what the runtime and the communication
# layer allocate while training, which the plan does not count), and of it at end the local peer's
# memory mapped here ("peers": its pages, resident in its own VmHWM, read in place from the first
# step on) and the rest ("own_end", what this rank itself holds at most: VmHWM_end - peers).
set -euo pipefail
cd "$(dirname "$0")/.."
shardc=$(realpath "${1:-build/shardc}")
steps=${2:-20}
rounds=${3:-3}
read -r -a extra <<<"${4:-}"
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
bash scripts/gen_corpus.sh "$t/data.txt" 400000 3 >/dev/null
m=(models/tiny.model -D d=256 -D layers=6 -D seq=128 -D micro_batch=2 -D dp=2 -D tp=1 "${extra[@]}")
# no checkpoint (--save-to ''): a trainer with --save-to maps its checkpoint snapshot's pages at start
# (rt_run_snapshot_prepare: the tensors the rank writes, outside the plan by design), which would
# add 37 MiB to zero 0-2's VmHWM and 28 MiB to zero 3's, not what the plan's stages change
run=(--data "$t/data.txt" --steps "$steps" --eval-every 0 --val-batches 1 --save-to '')
mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }
plan_field() { grep -E "^# +$2 +[0-9]+ B" "$1" | sed -E 's/.* ([0-9]+) B .*/\1/'; }
echo "nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg), $steps steps (first excluded), dp=2"
printf '%-6s %10s %10s %10s %10s %10s\n' zero params_MiB grads_MiB optim_MiB act_MiB peak_MiB
stages=()
for z in 0 1 2 3; do
  if ! "$shardc" plan "${m[@]}" -D zero=$z --world 2 --bytes >"$t/plan$z" 2>&1; then
    printf '%-6s refused: %s\n' "$z" "$(grep -m1 error "$t/plan$z" | sed 's/.*error: //')"
    continue
  fi
  printf '%-6s %10s %10s %10s %10s %10s\n' "$z" "$(mib "$(plan_field "$t/plan$z" parameters)")" \
    "$(mib "$(plan_field "$t/plan$z" gradients)")" "$(mib "$(plan_field "$t/plan$z" "optimizer state")")" \
    "$(mib "$(plan_field "$t/plan$z" activations)")" "$(mib "$(plan_field "$t/plan$z" peak)")"
  "$shardc" build "${m[@]}" -D zero=$z --world 2 -o "$t/z$z" >/dev/null 2>&1
  stages+=("$z")
done
median() { sort -g | awk '{ a[n++] = $1 } END { print n % 2 ? a[(n - 1) / 2] : (a[n / 2 - 1] + a[n / 2]) / 2 }'; }
field() { grep -o "\"$2\":[^,}]*" "$1" | cut -d: -f2 | tail -n +2; } # steps after the first
printf '%-6s %-5s %9s %9s %6s %14s %12s %8s %9s\n' round zero ms/step comm_ms comm% "VmHWM_start" "VmHWM_end" peers own_end
for r in $(seq 1 "$rounds"); do
  for z in "${stages[@]}"; do
    (cd "$t" && mpirun --mca pml ob1 -np 2 "$t/z$z" "${run[@]}" --log "$t/log.jsonl" >"$t/out" 2>&1)
    ms=$(field "$t/log.jsonl" ms | median)
    cm=$(field "$t/log.jsonl" comm_ms | median)
    hwm=$(grep -o 'measured peak resident [0-9.]* MiB' "$t/out" | head -1 | awk '{ print $4 }')
    hwm_end=$(grep -o 'measured peak resident [0-9.]* MiB' "$t/out" | tail -1 | awk '{ print $4 }')
    peers=$(grep '^memory at end:' "$t/out" | grep -o "[0-9.]* [KMG]iB of it the local peers" |
      awk '{ printf "%.1f", $2 == "KiB" ? $1 / 1024 : $2 == "GiB" ? $1 * 1024 : $1 }' || true)
    peers=${peers:-0}
    printf '%-6s %-5s %9.1f %9.1f %5.0f%% %14s %12s %8s %9.1f\n' "$r" "$z" "$ms" "$cm" "$(awk -v a="$cm" -v b="$ms" 'BEGIN { print 100 * a / b }')" "$hwm" "$hwm_end" "$peers" "$(awk -v a="$hwm_end" -v b="$peers" 'BEGIN { print a - b }')"
  done
done
