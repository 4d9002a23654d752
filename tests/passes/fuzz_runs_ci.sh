#!/usr/bin/env bash
# fuzz_runs_ci BUILD: a fixed handful of the plan-space fuzzer's samples run for real (scripts/fuzz_runs.sh
# --seeds: each trainer and its single-rank program built and run 3 steps under mpirun, the losses and the
# validation loss compared, the step-2 checkpoints resumed across layouts and in their own), so the runtime
# path of the fuzzer's samples runs in the suite (labels mpi, e2e). The seeds and what each must cover
# (`shardc plan`'s plan and recipe lines of the emitted sample; a sampler that changes fails here, as a
# seed that emits nothing fails in fuzz_runs.sh: choose others with `fuzz_plans --emit`):
#   20700024  pp 2 interleaved x cp 2 x ZeRO-3, recompute full        sharded checkpoints (even seed); --sample
#   20700046  tp 2 + sp x cp 2 x ZeRO-2                               sharded; SIGTERM to rank 0 before the
#             last step (a normal end), --sample
#   20700003  tp 4 + sp, 4 accumulation micro-steps, recompute full   logical (odd seed)
#   20700030  bf16, tp 2 + sp, 2 accumulation micro-steps, 1f1b       sharded; its step 2 resumed under
#             dp 2 x tp 2 + sp x ZeRO-3 offload (another layout; offload a no-op on the CPU target)
#   20700029  dp 2 x ZeRO-1: the seed whose logical checkpoint did not resume under its layout
#             (runtime/train/ckpt.c rt_ckpt_per_layer; mr_zero's "one->z1")         logical; SIGTERM to rank 0
#             before step 1 (stopped after it, resumed), --sample
# (The checks of a fraction of the samples, drawn from the seed: `checks` below, which the sample's line must
# name.)
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
build=$(abspath "$1")
want=(
  "20700024|dp 1 tp 1 pp 2 cp 2 |zero 3 |schedule interleaved|recompute full|precision f32"
  "20700046|tp 2 pp 1 cp 2 sp on zero 2 |precision f32"
  "20700003|dp 1 tp 4 pp 1 cp 1 sp on |microbatches 4 |batch 4 micro_batch 1 |precision f32"
  "20700030|dp 1 tp 2 pp 1 cp 1 sp on |microbatches 2 |precision bf16"
  "20700029|dp 2 tp 1 pp 1 cp 1 sp off zero 1 |precision f32"
)
declare -A checks=(
  [20700024]="sample"
  [20700046]="stop at step 3 (rank 0); sample"
  [20700003]="worst |rel| [0-9.e-]*)$"
  [20700030]="relayout to 4 ranks: dp 2, tp 2, cp 1, pp 1, sp on, zero 3 offload"
  [20700029]="stop at step 1 (rank 0); sample"
)
seeds=()
for w in "${want[@]}"; do
  IFS='|' read -r -a parts <<<"$w"
  s=${parts[0]}
  seeds+=("$s")
  "$build/tests/passes/fuzz_plans" --from "$s" --count 1 --emit "$t" >/dev/null 2>&1 || fail "fuzz_plans seed $s failed"
  [ -d "$t/$s" ] || fail "seed $s emitted no sample (the sampler changed: choose another seed)"
  mapfile -t pargs <"$t/$s/plan.args"
  got=$("$build/shardc" plan "$t/$s/plan.model" "${pargs[@]}" 2>/dev/null | grep -E '^  (plan|recipe):' | tr '\n' ' ')
  for p in "${parts[@]:1}"; do
    [[ "$got" == *"$p"* ]] || fail "seed $s no longer covers '$p' (its plan: $got)"
  done
done
bash scripts/fuzz_runs.sh --seeds "$(IFS=,; echo "${seeds[*]}")" "$build" | tee "$t/out"
[ "$(grep -c '^ok ' "$t/out")" = ${#seeds[@]} ] || fail "not every seed's sample passed"
for s in "${seeds[@]}"; do
  grep -q "^ok   seed $s (.*; ${checks[$s]}" "$t/out" || fail "seed $s's line does not name its checks '${checks[$s]}'"
done
