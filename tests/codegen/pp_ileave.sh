#!/usr/bin/env bash
# The interleaved schedule with virtual stages of unequal layer counts (passes/stage.c, passes/pipe.c)
# compiled and run under mpirun against the single-rank binary (label mpi): the tiny GPT with 6 layers,
# pp 2 with 2 chunks per stage, `pp 2 layers(1, 1, 3, 1)` (virtual stage k = c pp + s: stage 0 holds
# layers 0 and 2-4, stage 1 layers 1 and 5; fewer layers beside the embedding and the head; each
# stage's stacks 1 + 3 rows, chunk c padded to the largest chunk c), 4 micro-batches of 2, gives the single rank's loss curve over 20 AdamW steps within 1e-5
# relative (lib.sh's tolerance, justified in layouts.sh), and so does pp 2 x dp 2 under zero 3; its step-10 checkpoint (sharded: each rank
# writes its chunks' rows, without the padding) resumes on one rank with the uninterrupted step-11 loss,
# and the one rank's resumes under it.
set -euo pipefail
shardc=$(realpath "$1")
cd "$(dirname "$0")/../.."
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh
m=(-D seq=64 -D layers=6 -D batch=8)
sed "s/^  dp auto\$/  dp auto\n  pp 2 layers(1, 1, 3, 1)/" models/tiny.model >"$t/il.model"
"$shardc" build models/tiny.model "${m[@]}" -D micro_batch=8 --world 1 -o "$t/one" 2>/dev/null
plan=$("$shardc" plan "$t/il.model" "${m[@]}" -D micro_batch=2 -D dp=1 -D schedule=interleaved --world 2 2>/dev/null)
grep -q "^#   0     0-0,2-4      embedding" <<<"$plan" && grep -q "^#   1     1-1,5-5      head, loss" <<<"$plan" ||
  { echo "FAIL: the plan's virtual stages are not [1, 1, 3, 1]"; grep "^#   [01] " <<<"$plan"; exit 1; }
"$shardc" build "$t/il.model" "${m[@]}" -D micro_batch=2 -D dp=1 -D schedule=interleaved --world 2 -o "$t/pp2il" 2>/dev/null
"$t/one" "${run[@]}" --threads 2 --log "$t/one.jsonl" >/dev/null
"${mpi[@]}" -np 2 "$t/pp2il" "${run[@]}" --log "$t/pp2il.jsonl" >/dev/null
compare "tiny pp2 interleaved [1,1,3,1]" "$t/pp2il.jsonl" "$t/one.jsonl"
# ZeRO-3 over dp 2 on those stages (4 ranks: each stage's chunks stored split over dp, gathered a layer
# at a time in the loops, each layer's gradient reduce-scattered in its backward loop): the same curve
"$shardc" build "$t/il.model" "${m[@]}" -D micro_batch=2 -D dp=2 -D zero=3 -D schedule=interleaved --world 4 -o "$t/pp2ilz3" 2>/dev/null
"${mpi[@]}" -np 4 "$t/pp2ilz3" "${run[@]}" --log "$t/pp2ilz3.jsonl" >/dev/null
compare "tiny pp2 x dp2 interleaved [1,1,3,1] zero 3" "$t/pp2ilz3.jsonl" "$t/one.jsonl"
resume_on_one "pp2 interleaved layers(1, 1, 3, 1)" 2 "$t/pp2il" "$t/pp2il.jsonl" "$t/one"
# and the other way: the one rank's step-10 checkpoint resumed by the interleaved trainer (loaded into each
# stage's chunks past their padding) gives the one rank's uninterrupted step-11 loss
"$t/one" "${run[@]}" --threads 2 --stop-at 10 --save-to "$t/ck1" >/dev/null
"${mpi[@]}" -np 2 "$t/pp2il" "${run[@]}" --resume "$t/ck1" --stop-at 11 --log "$t/r1.jsonl" --save-to "$t/ck1r" >/dev/null
got=$(losses "$t/r1.jsonl" | head -1) want=$(losses "$t/one.jsonl" | sed -n 11p)
awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d;
  printf "resume 1 rank step 10 -> pp2 interleaved layers(1, 1, 3, 1): step 11 loss %s vs %s uninterrupted (|rel| %.1e)\n", a, b, d / b;
  exit (d / b <= 1e-5 ? 0 : 1) }' || { echo "FAIL: a one-rank checkpoint resumed under pp2 interleaved"; exit 1; }
echo "interleaved uneven stages: ok"
