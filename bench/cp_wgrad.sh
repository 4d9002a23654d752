#!/usr/bin/env bash
# cp's weight gradients: one GEMM contracting the batch with the tokens (Attrs.cb, since 2026-11-29) against one
# gradient per sequence and their sum (a compiler from before, e.g. a build of main at 31079b1e), side by side on
# the same machine and data. For each compiler and model: the plan's peak memory per rank (`shardc plan --bytes`)
# and the trainer's median step time (rank 0, first step excluded) under mpirun, rounds interleaved so that
# machine noise hits both alike.
#   bench/cp_wgrad.sh NEW_SHARDC OLD_SHARDC [STEPS] [ROUNDS]
# Env: EXTRA (more -D definitions for both models, e.g. "-D cp=4 -D recompute=full": the full recompute's ring run
# again in the backward, passes/recompute.c ring_hops, against the hops kept) and NP (ranks, default 2: cp x dp).
# Models (2 ranks, cp 2, 1 compute thread each):
#   tiny     models/tiny.model, micro-batch 16 (16 x 64 tokens a step, vocab 256, d 64)
#   llama    models/llama3-8b.model shrunk: vocab 256 (bytes), d 256, 2 layers, GQA 4 / 2, SwiGLU 512, seq 256,
#            micro-batch 8 (a layer's per-sequence SwiGLU gradient: 8 x [256, 512] f32, 4 MiB)
set -euo pipefail
cd "$(dirname "$0")/.."
new=${1:?usage: bench/cp_wgrad.sh NEW_SHARDC OLD_SHARDC [STEPS] [ROUNDS]}
old=${2:?usage: bench/cp_wgrad.sh NEW_SHARDC OLD_SHARDC [STEPS] [ROUNDS]}
steps=${3:-12}
rounds=${4:-3}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
bash scripts/gen_corpus.sh "$t/data.txt" 400000 3 >/dev/null
declare -A args
args[tiny]="models/tiny.model -D dp=1 -D cp=2 -D micro_batch=16 -D zero=0 -D recompute=none"
args[llama]="models/llama3-8b.model -D vocab=256 -D seq=256 -D d=256 -D heads=4 -D kv_heads=2 -D layers=2 -D ffn=512
  -D batch=8 -D micro_batch=8 -D dp=1 -D cp=2 -D tp=1 -D sp=off -D zero=0 -D recompute=none -D precision=f32"
np=${NP:-2}
for m in tiny llama; do args[$m]="${args[$m]} ${EXTRA:-}"; done
peak() { "$1" plan ${args[$2]} --world "$np" --bytes 2>/dev/null | awk '/^#   peak /{ printf "%.2f", $3 / 1048576 }'; }
for m in tiny llama; do
  for w in new old; do
    sc=$new
    [ $w = old ] && sc=$old
    "$sc" build ${args[$m]} --world "$np" -o "$t/$m.$w" >/dev/null 2>&1 || { echo "$w: $m does not build"; exit 1; }
    echo "$m $w: peak $(peak "$sc" $m) MiB per rank"
  done
done
run=(--data "$t/data.txt" --steps "$steps" --eval-every 0 --val-batches 1 --threads 1)
median() { sort -g | awk '{ a[n++] = $1 } END { print n % 2 ? a[(n - 1) / 2] : (a[n / 2 - 1] + a[n / 2]) / 2 }'; }
field() { grep -o "\"$2\":[^,}]*" "$1" | cut -d: -f2 | tail -n +2; } # steps after the first
echo "extra: ${EXTRA:-none}, $np ranks; nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg), $steps steps (first excluded)"
printf '%-6s %-6s %9s %9s %7s %12s\n' round model new_ms old_ms new/old "final loss"
for r in $(seq 1 "$rounds"); do
  for m in tiny llama; do
    for w in new old; do
      mpirun --mca pml ob1 -np "$np" "$t/$m.$w" "${run[@]}" --log "$t/$w.jsonl" >/dev/null 2>"$t/err" || { cat "$t/err"; exit 1; }
    done
    a=$(field "$t/new.jsonl" ms | median) b=$(field "$t/old.jsonl" ms | median)
    loss=$(grep -o '"loss":[^,]*' "$t/new.jsonl" | tail -1 | cut -d: -f2)
    lold=$(grep -o '"loss":[^,]*' "$t/old.jsonl" | tail -1 | cut -d: -f2)
    printf '%-6s %-6s %9.1f %9.1f %7.3f %12s\n' "$r" "$m" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { print a / b }')" "$loss/$lold"
  done
done
