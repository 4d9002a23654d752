#!/usr/bin/env bash
# Pipeline parallelism (passes/stage.c, passes/pipe.c: the layers split over pp stages, the
# GPipe / 1F1B schedule unrolled into stage-predicated instructions with send / recv) compiled
# and run under mpirun against the single-rank binary (label mpi).
#
#   the tiny GPT with 4 layers (tied embedding: its gradient is summed over the first and the
#   last stage), global batch 8: pp2 1F1B with 4 micro-batches, pp2 GPipe with 2, pp4 1F1B with
#   4, pp2 x dp2, pp2 x tp2, pp2 interleaved (2 chunks), pp4 zero bubble, pp2 x dp2 with ZeRO-2 and
#   full recompute and pp2 x dp2 with ZeRO-3 give the single-rank loss curve over
#   20 AdamW steps (with the recipe's gradient clipping), and so do pp4 interleaved of the tiny
#   GPT with 8 layers and pp2 x tp2 of a Llama-shaped model (untied, RoPE, GQA, sp); a checkpoint
#   written under pp2 interleaved at step 10 resumes on one rank with the uninterrupted run's
#   step-11 loss (checkpoints hold logical tensors: each stage its layers, interleaved ones too).
#
# Tolerance: |loss - loss_1rank| <= 1e-5 * |loss_1rank| at every step (lib.sh's, justified in
# layouts.sh): micro-batches add their gradients in another order than one big batch, and the
# tied embedding's two parts meet in an all-reduce: fp32 reorderings of a few ulps.
set -euo pipefail
shardc=$(realpath "$1")
cd "$(dirname "$0")/../.."
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh

m=(models/tiny.model -D seq=64 -D layers=4 -D batch=8)
"$shardc" build "${m[@]}" -D micro_batch=8 --world 1 -o "$t/one" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=1 -D pp=2 --world 2 -o "$t/pp2" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=1 -D pp=2 -D schedule=gpipe --world 2 -o "$t/pp2gpipe" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=1 -D pp=4 --world 4 -o "$t/pp4" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=2 -D pp=2 --world 4 -o "$t/pp2dp2" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=1 -D tp=2 -D pp=2 --world 4 -o "$t/pp2tp2" 2>/dev/null
"$t/one" "${run[@]}" --threads 2 --log "$t/one.jsonl" >/dev/null
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=1 -D pp=2 -D schedule=interleaved --world 2 -o "$t/pp2int" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=1 -D pp=4 -D schedule=zb --world 4 -o "$t/pp4zb" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=2 -D pp=2 -D zero=2 -D recompute=full --world 4 -o "$t/pp2dp2z2rc" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=2 -D pp=2 -D zero=3 --world 4 -o "$t/pp2dp2z3" 2>/dev/null
for c in pp2:2 pp2gpipe:2 pp4:4 pp2dp2:4 pp2tp2:4 pp2int:2 pp4zb:4 pp2dp2z2rc:4 pp2dp2z3:4; do
  n=${c%%:*}
  "${mpi[@]}" -np "${c#*:}" "$t/$n" "${run[@]}" --log "$t/$n.jsonl" >/dev/null
  compare "tiny $n" "$t/$n.jsonl" "$t/one.jsonl"
done
# interleaved at pp 4 (2 chunks of one layer per stage: 8 layers), against its own single rank
m8=(models/tiny.model -D seq=64 -D layers=8 -D batch=8)
"$shardc" build "${m8[@]}" -D micro_batch=8 --world 1 -o "$t/one8" 2>/dev/null
"$shardc" build "${m8[@]}" -D micro_batch=2 -D dp=1 -D pp=4 -D schedule=interleaved --world 4 -o "$t/pp4int" 2>/dev/null
"$t/one8" "${run[@]}" --threads 2 --log "$t/one8.jsonl" >/dev/null
"${mpi[@]}" -np 4 "$t/pp4int" "${run[@]}" --log "$t/pp4int.jsonl" >/dev/null
compare "tiny 8 layers pp4int" "$t/pp4int.jsonl" "$t/one8.jsonl"
l=(models/llama3-8b.model -D vocab=256 -D seq=64 -D d=64 -D heads=4 -D kv_heads=2 -D layers=2 -D ffn=96
   -D batch=4 -D zero=0 -D recompute=none -D precision=f32)
"$shardc" build "${l[@]}" -D micro_batch=4 -D dp=1 -D tp=1 -D sp=off --world 1 -o "$t/lone" 2>/dev/null
"$shardc" build "${l[@]}" -D micro_batch=2 -D dp=1 -D tp=2 -D sp=on -D pp=2 --world 4 -o "$t/lpp2tp2" 2>/dev/null
"$t/lone" "${run[@]}" --threads 2 --log "$t/lone.jsonl" >/dev/null
"${mpi[@]}" -np 4 "$t/lpp2tp2" "${run[@]}" --log "$t/lpp2tp2.jsonl" >/dev/null
compare "llama pp2tp2 sp" "$t/lpp2tp2.jsonl" "$t/lone.jsonl"
# a pp=2 interleaved checkpoint (each stage holds layers 0, 2 or 1, 3) resumes on one rank
"${mpi[@]}" -np 2 "$t/pp2int" "${run[@]}" --stop-at 10 --save-to "$t/ck10" >/dev/null
want=$(losses "$t/pp2int.jsonl" | sed -n 11p)
"$t/one" "${run[@]}" --threads 2 --resume "$t/ck10" --stop-at 11 --log "$t/r_one.jsonl" --save-to "$t/ck_r" >/dev/null
got=$(losses "$t/r_one.jsonl" | head -1)
awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d;
  printf "resume pp2 interleaved step 10 -> 1 rank: step 11 loss %s vs %s uninterrupted (|rel| %.1e)\n", a, b, d / b;
  exit (d / b <= 1e-5 ? 0 : 1) }' || { echo "FAIL: a pp2 checkpoint resumed on one rank"; exit 1; }
echo "pipeline parallelism: ok"
