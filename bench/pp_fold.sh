#!/usr/bin/env bash
# Each pipeline stage's gradient sums inside its backward loops (passes/pipe_fold.c), two compilers
# side by side (docs/performance.md, "Pipeline: the gradient sums inside the backward loops"):
#   1. the planned peak per rank (`shardc plan`: the worst stage's, and by stage) of tiny with 8 layers,
#      8 micro-batches of 1, at pp 2 and pp 4 under 1f1b, zb, interleaved and gpipe, and of GPT-3 175B
#      at tp 8 x pp 16 x dp 8 (CUDA target, p4d-x128, ZeRO-2, selective recompute, micro-batch 2);
#   2. tiny pp 2 1F1B on 2 CPU ranks (4 layers, seq 64, 8 micro-batches of 1, 1 thread a rank): the
#      two trainers alternated ROUNDS times, STEPS steps each; per run the median step (the first
#      excluded) and, from --trace (bench/pp_gaps.py), each rank's median F, B and time between its
#      instructions per step (receives excluded).
#   bench/pp_fold.sh BEFORE_SHARDC AFTER_SHARDC [ROUNDS] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
before=$(realpath "$1") after=$(realpath "$2") rounds=${3:-3} steps=${4:-30}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tiny=(models/tiny.model -D seq=64 -D layers=8 -D batch=8 -D micro_batch=1 -D dp=1)
gpt3=(models/gpt3-175b.model --target cuda --topology models/topo/p4d-x128.topo -D tp=8 -D sp=on -D dp=8 -D pp=16
      -D zero=2 -D recompute=selective -D micro_batch=2)
echo "planned peak per rank (MiB): before | after; by stage"
for c in "pp=2 schedule=1f1b" "pp=4 schedule=1f1b" "pp=2 schedule=zb" "pp=4 schedule=zb" "pp=2 schedule=interleaved" \
  "pp=4 schedule=interleaved" "pp=2 schedule=gpipe" gpt3; do
  row=""
  for s in "$before" "$after"; do
    bytes=() # (the memory table's sizes in bytes: --bytes, where the shardc has it, since 2026-11)
    "$s" --help 2>&1 | grep -q -- --bytes && bytes=(--bytes)
    if [ "$c" = gpt3 ]; then out=$("$s" plan "${gpt3[@]}" "${bytes[@]}" 2>&1 || true)
    else
      d=()
      for x in $c; do d+=(-D "$x"); done
      out=$("$s" plan "${tiny[@]}" "${d[@]}" --world "${c:3:1}" "${bytes[@]}" 2>&1 || true)
    fi
    row+="$(awk '/^#   peak /{ print $5 }' <<<"$out") [$(grep -o 'by stage: .*' <<<"$out" | sed 's/by stage: //; s/ MiB//g')] | "
  done
  echo "  $c: $row"
done
bash scripts/gen_corpus.sh "$t/data.txt" 400000 3 >/dev/null
m=(models/tiny.model -D seq=64 -D layers=4 -D batch=8 -D micro_batch=1 -D dp=1 -D pp=2 --world 2)
"$before" build "${m[@]}" -o "$t/before" >/dev/null 2>&1
"$after" build "${m[@]}" -o "$t/after" >/dev/null 2>&1
for r in $(seq "$rounds"); do
  for b in before after; do
    mpirun -np 2 "$t/$b" --data "$t/data.txt" --steps "$steps" --eval-every 0 --val-batches 1 --threads 1 \
      --log "$t/$b.jsonl" --trace "$t/$b.json" --save-to "$t/ck" </dev/null >/dev/null 2>&1
    med=$(python3 -c "
import json, statistics
ms = [json.loads(l)['ms'] for l in open('$t/$b.jsonl') if '\"ms\"' in l][1:]
print('%.2f ms/step (min %.2f)' % (statistics.median(ms), min(ms)))")
    echo "round $r $b: $med; $(python3 bench/pp_gaps.py "$t/$b.json")"
  done
done
