#!/usr/bin/env bash
# Gradient-accumulation fusion (passes/gacc.c), two compilers side by side (docs/performance.md,
# "Gradient accumulation: the weight-gradient GEMM accumulates into the sum"):
#   1. tiny (4 layers, seq 64, D=d) with accumulation on 1 CPU rank: batch 8 in 8 micro-steps of 1;
#   2. tiny pp 2 1F1B on 2 CPU ranks (4 layers, seq 64, 8 micro-batches of 1), with each rank's median
#      F, B and time between its instructions per step from --trace (bench/pp_gaps.py).
# The trainers alternate ROUNDS times, STEPS steps each, 1 thread a rank; per run the median step
# (the first excluded) and the minimum; for the 1-rank run also its CPU time (user + system, the
# process's own: less disturbed than the wall time by the other jobs of a shared machine).
#   bench/gacc.sh BEFORE_SHARDC AFTER_SHARDC [ROUNDS] [STEPS] [D]
set -euo pipefail
cd "$(dirname "$0")/.."
before=$(realpath "$1") after=$(realpath "$2") rounds=${3:-3} steps=${4:-30} d=${5:-64}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
bash scripts/gen_corpus.sh "$t/data.txt" 400000 3 >/dev/null
common=(models/tiny.model -D seq=64 -D layers=4 -D "d=$d" -D batch=8 -D micro_batch=1 -D dp=1)
for s in before after; do
  sc=$before
  [ $s = after ] && sc=$after
  "$sc" build "${common[@]}" --world 1 -o "$t/accum-$s" >/dev/null 2>&1
  "$sc" build "${common[@]}" -D pp=2 --world 2 -o "$t/pp-$s" >/dev/null 2>&1
done
median() {
  python3 -c "
import json, statistics
ms = [json.loads(l)['ms'] for l in open('$1') if '\"ms\"' in l][1:]
print('%.2f ms/step (min %.2f)' % (statistics.median(ms), min(ms)))"
}
for r in $(seq "$rounds"); do
  for s in before after; do
    TIMEFORMAT=%U+%S
    cpu=$( { time "$t/accum-$s" --data "$t/data.txt" --steps "$steps" --eval-every 0 --val-batches 1 --threads 1 \
      --log "$t/a.jsonl" --save-to "$t/ck" </dev/null >/dev/null 2>&1; } 2>&1)
    echo "round $r accum 8 $s: $(median "$t/a.jsonl"); CPU $(python3 -c "print('%.2f' % ($cpu))") s for $steps steps"
  done
  for s in before after; do
    mpirun -np 2 "$t/pp-$s" --data "$t/data.txt" --steps "$steps" --eval-every 0 --val-batches 1 --threads 1 \
      --log "$t/p.jsonl" --trace "$t/p.json" --save-to "$t/ck" </dev/null >/dev/null 2>&1
    echo "round $r pp 2 1f1b $s: $(median "$t/p.jsonl"); $(python3 bench/pp_gaps.py "$t/p.json")"
  done
done
