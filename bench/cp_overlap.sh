#!/usr/bin/env bash
# Context parallelism's communication, blocking against overlapped, on the same binary and work (the
# runtime switches SHARDRT_CP_COMM for the ring hops, runtime/ops/coll.h rt_coll_shift_start, and
# SHARDRT_DP_COMM for the weight gradients' all-reduces, over cp alone at dp 1):
#   blocking  each hop one blocking shift (receive and send posted, both waited) between blocks, and
#             each gradient bucket one blocking all-reduce: the ring before overlap
#   hops      the hops overlapped, the gradient buckets blocking (the runtime before the gradients'
#             all-reduces over cp alone were asynchronous)
#   async     each hop started before the block it overlaps (passes/shard_cp.c issues it there),
#             each gradient bucket started in the backward loop where its layer's gradients are
#             made (passes/grad_buckets.c), progressed between kernels, waited before its first
#             reader (the default)
# Model: Llama-shaped (RMSNorm, SwiGLU, RoPE, GQA) at SEQ tokens (default 1024), d=128, 2 layers,
# one sequence per step, cp = each of CPS (default "2 4": 4 ranks oversubscribe a 2-core machine),
# 1 compute thread per rank. Rounds are interleaved so machine noise hits both modes alike.
#   bench/cp_overlap.sh [SHARDC] [STEPS] [ROUNDS] [SEQ]
# Per round, cp and mode: the median step time of rank 0 (first step excluded), its median exposed
# communication (time inside every collective call, progress call and wait) and the ring's own
# exposed time per step (start + wait of the hops, or the blocking shifts; SHARDRT_COLL_STATS: the
# mean over the steps after the first and over the ranks), with its share of the step.
set -euo pipefail
cd "$(dirname "$0")/.."
shardc=${1:-build/shardc}
steps=${2:-10}
rounds=${3:-3}
seq=${4:-1024}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
bash scripts/gen_corpus.sh "$t/data.txt" 400000 3 >/dev/null
m=(models/llama3-8b.model -D vocab=256 -D seq="$seq" -D d=128 -D heads=4 -D kv_heads=2 -D layers=2 -D ffn=256
   -D batch=1 -D micro_batch=1 -D dp=1 -D zero=0 -D sp=off -D tp=1)
for cp in ${CPS:-2 4}; do
  "$shardc" build "${m[@]}" -D cp="$cp" --world "$cp" -o "$t/cp$cp" >/dev/null 2>&1
done
run=(--data "$t/data.txt" --steps "$steps" --eval-every 0 --val-batches 1 --threads 1)
median() { sort -g | awk '{ a[n++] = $1 } END { print n % 2 ? a[(n - 1) / 2] : (a[n / 2 - 1] + a[n / 2]) / 2 }'; }
field() { grep -o "\"$2\":[^,}]*" "$1" | cut -d: -f2 | tail -n +2; } # steps after the first
echo "nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg), seq $seq, $steps steps (first excluded from the medians)"
printf '%-6s %-3s %-9s %9s %9s %6s %9s %6s %10s\n' round cp mode ms/step comm_ms comm% ring_ms ring% "final loss"
for r in $(seq 1 "$rounds"); do
  for cp in ${CPS:-2 4}; do
    for mode in ${MODES:-blocking hops async}; do
      hop=$mode grad=$mode
      [ "$mode" = hops ] && hop=async grad=blocking
      SHARDRT_CP_COMM=$hop SHARDRT_DP_COMM=$grad SHARDRT_COLL_STATS=1 mpirun -x SHARDRT_CP_COMM -x SHARDRT_DP_COMM \
        -x SHARDRT_COLL_STATS --mca pml ob1 \
        -np "$cp" "$t/cp$cp" "${run[@]}" --log "$t/log.jsonl" >/dev/null 2>"$t/err"
      ms=$(field "$t/log.jsonl" ms | median)
      cm=$(field "$t/log.jsonl" comm_ms | median)
      ring=$(grep -o 'steady: [0-9.]* s over [0-9]* steps' "$t/err" |
        awk '{ if ($5 > 0) { x += $2 / $5; n++ } } END { print n ? 1e3 * x / n : -1 }')
      loss=$(grep -o '"loss":[^,]*' "$t/log.jsonl" | tail -1 | cut -d: -f2)
      printf '%-6s %-3s %-9s %9.1f %9.1f %5.0f%% %9.1f %5.0f%% %10s\n' "$r" "$cp" "$mode" "$ms" "$cm" \
        "$(awk -v a="$cm" -v b="$ms" 'BEGIN { print 100 * a / b }')" "$ring" \
        "$(awk -v a="$ring" -v b="$ms" 'BEGIN { print 100 * a / b }')" "$loss"
    done
  done
done
