#!/usr/bin/env bash
# Per-step time of the compiled tiny GPT under 1 rank, dp=2, tp=2, tp=2+sp and dp=2 x tp=2 on the
# same total work (global batch 16 x 64 tokens), and the share of the step spent in collectives
# (rank 0, measured around each collective of the generated code).
#   bench/train_layouts.sh [SHARDC] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
shardc=${1:-build/shardc}
steps=${2:-100}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
bash scripts/gen_corpus.sh "$t/data.txt" 200000 3 >/dev/null
m=(models/tiny.model -D seq=64)
run=(--data "$t/data.txt" --steps "$steps" --eval-every 0 --val-batches 1)
"$shardc" build "${m[@]}" -D micro_batch=16 --world 1 -o "$t/one"
"$shardc" build "${m[@]}" -D micro_batch=8 -D dp=2 -D tp=1 --world 2 -o "$t/dp2"
"$shardc" build "${m[@]}" -D micro_batch=16 -D dp=1 -D tp=2 --world 2 -o "$t/tp2"
"$shardc" build "${m[@]}" -D micro_batch=16 -D dp=1 -D tp=2 -D sp=true --world 2 -o "$t/tp2sp"
"$shardc" build "${m[@]}" -D micro_batch=8 -D dp=2 -D tp=2 --world 4 -o "$t/dp2tp2"
echo "1 rank, 2 threads:"; "$t/one" "${run[@]}" --threads 2 | grep '^done'
echo "1 rank, 1 thread:"; "$t/one" "${run[@]}" --threads 1 | grep '^done'
for c in dp2:2 tp2:2 tp2sp:2 dp2tp2:4; do
  echo "${c%%:*} (${c#*:} ranks):"
  mpirun --mca pml ob1 -np "${c#*:}" "$t/${c%%:*}" "${run[@]}" | grep '^done'
done
