#!/usr/bin/env bash
# Data-parallel gradient all-reduce, dp=2, on the same binary and work, four ways (the runtime
# switch SHARDRT_DP_COMM):
#   member    one blocking all-reduce per gradient (the code before buckets)
#   blocking  one blocking all-reduce per bucket
#   lazy      buckets started asynchronously, progressed only when waited (no progress during compute)
#   async     buckets started asynchronously and progressed between kernels (the default)
# A mode NAME-plain runs NAME with the trainer's memory in plain memory (SHARDRT_SHMEM=0: the
# peers reach it by process_vm_readv/writev, not through mappings); MODES picks the modes
# (default "member blocking lazy async"; e.g. MODES="async-plain async").
# Rounds are interleaved so machine noise hits every mode alike. Model: the tiny GPT widened
# (d=256, 6 layers, seq 128: 4.8 M parameters, 18.3 MiB of gradients per step), micro-batch 2 per
# rank (a small per-rank batch: the regime where gradient communication matters).
#   bench/dp_overlap.sh [SHARDC] [STEPS] [ROUNDS] [BUCKET]
# Per round and mode (rank 0; the first step excluded): the median step time, the median exposed
# communication (time inside collective calls, progress calls and waits) and its share of the
# step; for async / lazy, how many bucket all-reduces finished during compute (before their wait).
set -euo pipefail
cd "$(dirname "$0")/.."
shardc=${1:-build/shardc}
steps=${2:-20}
rounds=${3:-3}
bucket=${4:-25MiB}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
bash scripts/gen_corpus.sh "$t/data.txt" 400000 3 >/dev/null
m=(models/tiny.model -D d=256 -D layers=6 -D seq=128)
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=2 -D tp=1 -D bucket="$bucket" --world 2 -o "$t/dp2"
run=(--data "$t/data.txt" --steps "$steps" --eval-every 0 --val-batches 1)
median() { sort -g | awk '{ a[n++] = $1 } END { print n % 2 ? a[(n - 1) / 2] : (a[n / 2 - 1] + a[n / 2]) / 2 }'; }
field() { grep -o "\"$2\":[^,}]*" "$1" | cut -d: -f2 | tail -n +2; } # steps after the first
echo "nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg), bucket $bucket, $steps steps (first excluded)"
printf '%-6s %-9s %9s %9s %6s %18s\n' round mode ms/step comm_ms comm% "done during compute"
for r in $(seq 1 "$rounds"); do
  for mode in ${MODES:-member blocking lazy async}; do
    shm=1
    case $mode in *-plain) shm=0 ;; esac
    SHARDRT_DP_COMM=${mode%-plain} SHARDRT_SHMEM=$shm SHARDRT_COLL_STATS=1 mpirun -x SHARDRT_DP_COMM -x SHARDRT_SHMEM -x SHARDRT_COLL_STATS --mca pml ob1 -np 2 "$t/dp2" "${run[@]}" --log "$t/log.jsonl" \
      >/dev/null 2>"$t/err"
    ms=$(field "$t/log.jsonl" ms | median)
    cm=$(field "$t/log.jsonl" comm_ms | median)
    early=$(grep -m1 -o 'async all-reduces [0-9]* ([0-9]* done' "$t/err" | awk '{ print substr($4, 2) "/" $3 }')
    case $mode in async* | lazy*) ;; *) early=- ;; esac
    printf '%-6s %-9s %9.1f %9.1f %5.0f%% %18s\n' "$r" "$mode" "$ms" "$cm" "$(awk -v a="$cm" -v b="$ms" 'BEGIN { print 100 * a / b }')" "$early"
  done
done
