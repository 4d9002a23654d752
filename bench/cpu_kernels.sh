#!/usr/bin/env bash
# Benchmark: the GPT-2 124M CPU trainer built with the C kernels (--cpu-kernels c) against the one
# built with LLVM's (--cpu-kernels llvm), llm.c's CPU configuration (B=4, T=64), side by side: the two
# trainers alternate, `reps` runs of `steps` steps each, and each build's figure is its best run's
# median step (the first step of a run is dropped: it warms caches and threads). Numbers in
# docs/performance.md ("CPU kernels through LLVM").
#   bench/cpu_kernels.sh [reps=3] [steps=6] [threads=2]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
steps=${2:-6}
threads=${3:-2}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
shardc=${SHARDC:-build/shardc}
for k in c llvm; do
  "$shardc" build models/gpt2-124m.model -D micro_batch=4 -D batch=4 -D seq=64 -D zero=0 --world 1 --cpu-kernels "$k" \
    -o "$t/train_$k" 2>/dev/null
done
python3 bench/gpt2_tokens.py "$t/tok.bin"
for r in $(seq "$reps"); do
  for k in c llvm; do
    "$t/train_$k" --data "$t/tok.bin" --val "$t/tok.bin" --val-batches 1 --eval-every 0 --steps "$steps" \
      --threads "$threads" --log "$t/$k.$r.jsonl" >/dev/null
  done
done
python3 - "$t" "$reps" <<'PY'
import json, statistics, sys
d, reps = sys.argv[1], int(sys.argv[2])
best = {}
for k in ("c", "llvm"):
    meds = []
    for r in range(1, reps + 1):
        rows = [json.loads(l) for l in open(f"{d}/{k}.{r}.jsonl") if '"tokens_per_s"' in l]
        rows = rows[1:] if len(rows) > 1 else rows
        meds.append(statistics.median(x["ms"] for x in rows))
    best[k] = min(meds)
    print(f"--cpu-kernels {k:4s}: best median {best[k]:.0f} ms/step (runs: {', '.join(f'{m:.0f}' for m in meds)})")
print(f"gpt2-124m B=4 T=64: C kernels / LLVM kernels = {best['c'] / best['llvm']:.3f}x")
PY
