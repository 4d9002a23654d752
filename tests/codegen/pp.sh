#!/usr/bin/env bash
# Pipeline parallelism (passes/stage.c, passes/pipe.c: the layers split over pp stages, the
# GPipe / 1F1B schedule unrolled into stage-predicated instructions with send / recv) compiled
# and run under mpirun against the single-rank binary (label mpi).
#
#   the tiny GPT with 4 layers (tied embedding: its gradient is summed over the first and the
#   last stage), global batch 8: pp2 1F1B with 4 micro-batches, pp2 GPipe with 2, pp4 1F1B with
#   4, pp2 x dp2, pp2 x tp2, pp2 interleaved (2 chunks), pp4 zero bubble, pp2 x dp2 with ZeRO-2 and
#   full recompute, pp2 zero bubble with full recompute (W takes the GEMMs' inputs B's recompute
#   made, held from B to W: passes/recompute.c), pp2 x dp2 with ZeRO-3 and pp2 x dp2 zero bubble with ZeRO-2 (their scatter waits
#   deferred to the next iteration) give the single-rank loss curve over
#   20 AdamW steps (with the recipe's gradient clipping), and so do pp4 interleaved of the tiny
#   GPT with 8 layers, pp2 x tp2 of a Llama-shaped model (untied, RoPE, GQA, sp) and its pp2 x dp2 zero
#   bubble with ZeRO-2 (the embedding's scatter after stage 0's W: passes/zero_late.c); a checkpoint
#   written under pp2 interleaved at step 10 resumes on one rank with the uninterrupted run's
#   step-11 loss (checkpoints hold logical tensors: each stage its layers, interleaved ones too).
#   Tiny 6 layers pp2 x dp2 ZeRO-2 zero bubble, full recompute, `zb_w hold(1)` (W holding for the
#   last layer of each stage only: passes/recompute_split.c) against its single rank.
#   Stages of unequal layer counts (pp2 layers(1, 3), pp3 layers(1, 2, 1), pp2 layers(3, 1) zb x
#   dp2, and pp3 layers(balanced) 1F1B: the stage pass's [1, 2, 1]) give the single-rank curve too,
#   and their checkpoints resume across layouts. The
#   parameters outside the layers are held on the stages reading them only: a pp4 checkpoint
#   (sharded and logical) resumes on one rank and under pp2, a one-rank one under pp4. A parameter
#   outside the layers that every layer reads (pp_shared.model's `gate`): pp4 against its one rank.
#   --sample from the single rank's weights gives its tokens under pp2, pp4 zb, pp2 x dp2 ZeRO-3, pp2 x tp2,
#   pp2 interleaved, pp2 x dp2 ZeRO-2 full recompute and the Llama-shaped pp2 x tp2 sp (vocab-parallel).
#
# Tolerance: |loss - loss_1rank| <= 1e-5 * |loss_1rank| at every step (lib.sh's, justified in
# layouts.sh): micro-batches add their gradients in another order than one big batch, and the
# tied embedding's two parts meet in an all-reduce (pp2) or an exchange between the first and the
# last stage (pp4): fp32 reorderings of a few ulps.
set -euo pipefail
shardc=$(realpath "$1")
cd "$(dirname "$0")/../.."
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh
# resumed "WHAT:LOG:REF"...: the first loss LOG logged (step 11, resumed from step 10) within 1e-5 of
# REF's step 11 (the uninterrupted run's)
resumed() {
  local r what f ref got want
  for r in "$@"; do
    IFS=: read -r what f ref <<<"$r"
    got=$(losses "$f" | head -1)
    want=$(losses "$ref" | sed -n 11p)
    awk -v a="$got" -v b="$want" -v w="$what" 'BEGIN { d = a - b; if (d < 0) d = -d;
      printf "resume %s, step 10: step 11 loss %s vs %s uninterrupted (|rel| %.1e)\n", w, a, b, d / b;
      exit (d / b <= 1e-5 ? 0 : 1) }' || { echo "FAIL: resume $what"; exit 1; }
  done
}

m=(models/tiny.model -D seq=64 -D layers=4 -D batch=8)
"$shardc" build "${m[@]}" -D micro_batch=8 --world 1 -o "$t/one" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=1 -D pp=2 --world 2 -o "$t/pp2" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=1 -D pp=2 -D schedule=gpipe --world 2 -o "$t/pp2gpipe" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=1 -D pp=4 --world 4 -o "$t/pp4" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=2 -D pp=2 --world 4 -o "$t/pp2dp2" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=1 -D tp=2 -D pp=2 --world 4 -o "$t/pp2tp2" 2>/dev/null
"$t/one" "${run[@]}" --threads 2 --log "$t/one.jsonl" --save-to "$t/ck_one" >/dev/null
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=1 -D pp=2 -D schedule=interleaved --world 2 -o "$t/pp2int" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=1 -D pp=4 -D schedule=zb --world 4 -o "$t/pp4zb" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=2 -D pp=2 -D zero=2 -D recompute=full --world 4 -o "$t/pp2dp2z2rc" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=1 -D pp=2 -D schedule=zb -D recompute=full --world 2 -o "$t/pp2zbrc" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=2 -D pp=2 -D zero=3 --world 4 -o "$t/pp2dp2z3" 2>/dev/null
# ZeRO-2/3 under pp: the B (zb: W) instructions' backward loops wait their reduce-scatters in the next
# iteration (passes/zero_defer.c; 2 layers a stage), the last after the loop
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=2 -D pp=2 -D zero=2 -D schedule=zb --world 4 -o "$t/pp2dp2z2zb" 2>/dev/null
for z in "-D zero=3" "-D zero=2 -D schedule=zb"; do
  # shellcheck disable=SC2086
  dw=$("$shardc" plan "${m[@]}" -D micro_batch=2 -D dp=2 -D pp=2 $z --world 4 2>/dev/null)
  grep -q "deferred waits .* waited in the next iteration" <<<"$dw" || { echo "FAIL: pp2 x dp2 $z: the scatter waits not deferred"; exit 1; }
done
for c in pp2:2 pp2gpipe:2 pp4:4 pp2dp2:4 pp2tp2:4 pp2int:2 pp4zb:4 pp2dp2z2rc:4 pp2zbrc:2 pp2dp2z3:4 pp2dp2z2zb:4; do
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
# zb under full recompute with W holding for the last layer of each stage's 3 only (zb_w hold(1):
# passes/recompute_split.c cuts each F, B, W into loops over 2 and 1 layers, the stacks' row views, the
# gradients' concats), pp2 x dp2 ZeRO-2 (deferred waits in both parts), against its own single rank
m6=(models/tiny.model -D seq=64 -D layers=6 -D batch=8)
"$shardc" build "${m6[@]}" -D micro_batch=8 --world 1 -o "$t/one6" 2>/dev/null
"$shardc" build "${m6[@]}" -D micro_batch=2 -D dp=2 -D pp=2 -D zero=2 -D schedule=zb -D recompute=full -D zb_w=hold:1 --world 4 \
  -o "$t/pp2dp2z2zbh1" 2>/dev/null
"$t/one6" "${run[@]}" --threads 2 --log "$t/one6.jsonl" >/dev/null
"${mpi[@]}" -np 4 "$t/pp2dp2z2zbh1" "${run[@]}" --log "$t/pp2dp2z2zbh1.jsonl" >/dev/null
compare "tiny 6 layers pp2dp2z2zb hold(1)" "$t/pp2dp2z2zbh1.jsonl" "$t/one6.jsonl"
l=(models/llama3-8b.model -D vocab=256 -D seq=64 -D d=64 -D heads=4 -D kv_heads=2 -D layers=2 -D ffn=96
   -D batch=4 -D zero=0 -D recompute=none -D precision=f32)
"$shardc" build "${l[@]}" -D micro_batch=4 -D dp=1 -D tp=1 -D sp=off --world 1 -o "$t/lone" 2>/dev/null
"$shardc" build "${l[@]}" -D micro_batch=2 -D dp=1 -D tp=2 -D sp=on -D pp=2 --world 4 -o "$t/lpp2tp2" 2>/dev/null
"$t/lone" "${run[@]}" --threads 2 --log "$t/lone.jsonl" --save-to "$t/ck_lone" >/dev/null
"${mpi[@]}" -np 4 "$t/lpp2tp2" "${run[@]}" --log "$t/lpp2tp2.jsonl" >/dev/null
compare "llama pp2tp2 sp" "$t/lpp2tp2.jsonl" "$t/lone.jsonl"
# --sample: the logits entry runs the stages' forward of one micro-batch (the logits on the last stage,
# gathered over pp from it: codegen/emit.c, logits_tensor.stages); from the single rank's step-20
# weights each schedule samples its tokens (temperature 0.5, the recipe's seed)
"$t/one" "${samp[@]}" --threads 2 --init-from "$t/ck_one/step_00000020" >"$t/s_one.out"
for c in pp2:2 pp4zb:4 pp2dp2z3:4 pp2tp2:4 pp2int:2 pp2dp2z2rc:4; do
  "${mpi[@]}" -np "${c#*:}" "$t/${c%%:*}" "${samp[@]}" --init-from "$t/ck_one/step_00000020" >"$t/s_${c%%:*}.out"
  same_sample "sample: ${c%%:*}" "$t/s_${c%%:*}.out" "$t/s_one.out"
done
"$t/lone" "${samp[@]}" --threads 2 --init-from "$t/ck_lone/step_00000020" >"$t/s_lone.out"
"${mpi[@]}" -np 4 "$t/lpp2tp2" "${samp[@]}" --init-from "$t/ck_lone/step_00000020" >"$t/s_lpp2tp2.out"
same_sample "sample: llama pp2tp2 sp" "$t/s_lpp2tp2.out" "$t/s_lone.out"
# zb x dp2 under ZeRO-2 with a 64 KiB bucket (the untied embedding's gradient scattered alone): its
# scatter issued after stage 0's W loop (passes/zero_late.c: the IR after zlate is not the one before it)
lz=("${l[@]}" -D micro_batch=1 -D dp=2 -D tp=1 -D sp=off -D pp=2 -D zero=2 -D schedule=zb -D bucket=64KiB --world 4)
cmp -s <("$shardc" plan "${lz[@]}" --dump-ir=after:owners 2>/dev/null | tail -n +2) \
  <("$shardc" plan "${lz[@]}" --dump-ir=after:zlate 2>/dev/null | tail -n +2) &&
  { echo "FAIL: llama pp2 x dp2 zb zero 2: zlate moved nothing"; exit 1; }
"$shardc" build "${lz[@]}" -o "$t/lpp2dp2z2zb" 2>/dev/null
"${mpi[@]}" -np 4 "$t/lpp2dp2z2zb" "${run[@]}" --log "$t/lpp2dp2z2zb.jsonl" >/dev/null
compare "llama pp2 x dp2 zb zero 2 (zlate)" "$t/lpp2dp2z2zb.jsonl" "$t/lone.jsonl"
# stages of unequal layer counts (`pp N layers(..)`: each stage's block of the layer stacks padded to
# the largest count): pp2 layers(1, 3) 1F1B, pp3 layers(1, 2, 1) GPipe (3 does not divide 4), pp2
# layers(3, 1) zb x dp2, against the single rank
uv="$t/uneven"
mkdir -p "$uv"
stages() { sed "s/^  dp auto\$/  dp auto\n  pp $1/" models/tiny.model >"$uv/$2.model"; }
stages "2 layers(1, 3)" s13
stages "3 layers(1, 2, 1)" s121
stages "2 layers(3, 1)" s31
stages "3 layers(balanced)" sbal
"$shardc" build "$uv/s13.model" "${m[@]:1}" -D micro_batch=2 -D dp=1 --world 2 -o "$t/pp2s13" 2>/dev/null
# `layers(balanced)`: the stage pass's split by the cost model's time and memory, [1, 2, 1] here, 1F1B
# (the plan read whole first: `| grep -q` under pipefail fails when grep exits before shardc stops writing)
bal=$("$shardc" plan "$uv/sbal.model" "${m[@]:1}" -D micro_batch=2 -D dp=1 --world 3 2>/dev/null)
grep -q "^#   layers(balanced): \[1, 2, 1\]" <<<"$bal" || { echo "FAIL: pp3 layers(balanced) is not [1, 2, 1]"; exit 1; }
"$shardc" build "$uv/sbal.model" "${m[@]:1}" -D micro_batch=2 -D dp=1 --world 3 -o "$t/pp3bal" 2>/dev/null
"$shardc" build "$uv/s121.model" "${m[@]:1}" -D micro_batch=2 -D dp=1 -D schedule=gpipe --world 3 -o "$t/pp3s121" 2>/dev/null
"$shardc" build "$uv/s31.model" "${m[@]:1}" -D micro_batch=2 -D dp=2 -D schedule=zb --world 4 -o "$t/pp2s31dp2zb" 2>/dev/null
for c in pp2s13:2 pp3s121:3 pp2s31dp2zb:4 pp3bal:3; do
  n=${c%%:*}
  "${mpi[@]}" -np "${c#*:}" "$t/$n" "${run[@]}" --log "$t/$n.jsonl" >/dev/null
  compare "tiny $n" "$t/$n.jsonl" "$t/one.jsonl"
done
# a pp2 layers(1, 3) checkpoint resumes on one rank, and the even pp2 1F1B one under layers(1, 3)
"${mpi[@]}" -np 2 "$t/pp2s13" "${run[@]}" --stop-at 10 --save-to "$t/cks10" >/dev/null
"$t/one" "${run[@]}" --threads 2 --resume "$t/cks10" --stop-at 11 --log "$t/rs_one.jsonl" --save-to "$t/cks_r" >/dev/null
"${mpi[@]}" -np 2 "$t/pp2" "${run[@]}" --stop-at 10 --save-to "$t/cke10" >/dev/null
"${mpi[@]}" -np 2 "$t/pp2s13" "${run[@]}" --resume "$t/cke10" --stop-at 11 --log "$t/rs_s13.jsonl" --save-to "$t/cke_r" >/dev/null
resumed "pp2 layers(1, 3) -> 1 rank:$t/rs_one.jsonl:$t/pp2s13.jsonl" "pp2 even -> pp2 layers(1, 3):$t/rs_s13.jsonl:$t/pp2.jsonl"
# a pp=2 interleaved checkpoint (each stage holds layers 0, 2 or 1, 3) resumes on one rank
"${mpi[@]}" -np 2 "$t/pp2int" "${run[@]}" --stop-at 10 --save-to "$t/ck10" >/dev/null
want=$(losses "$t/pp2int.jsonl" | sed -n 11p)
"$t/one" "${run[@]}" --threads 2 --resume "$t/ck10" --stop-at 11 --log "$t/r_one.jsonl" --save-to "$t/ck_r" >/dev/null
got=$(losses "$t/r_one.jsonl" | head -1)
awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d;
  printf "resume pp2 interleaved step 10 -> 1 rank: step 11 loss %s vs %s uninterrupted (|rel| %.1e)\n", a, b, d / b;
  exit (d / b <= 1e-5 ? 0 : 1) }' || { echo "FAIL: a pp2 checkpoint resumed on one rank"; exit 1; }
# parameters outside the layers held on the stages reading them only (pp4: wpe on stage 0, the final
# norm on 3, the tied wte on 0 and 3; their bytes are other values' on the other stages): a pp4
# checkpoint, sharded (each written by its first holder) or logical (gathered from its holders),
# resumes on one rank and under pp2, and a one-rank one under pp4, with the uninterrupted step-11 loss
"${mpi[@]}" -np 4 "$t/pp4" "${run[@]}" --stop-at 10 --save-to "$t/ck4" >/dev/null
"${mpi[@]}" -np 4 "$t/pp4" "${run[@]}" --stop-at 10 --ckpt-format logical --save-to "$t/ck4l" >/dev/null
"$t/one" "${run[@]}" --threads 2 --stop-at 10 --save-to "$t/ck1" >/dev/null
"$t/one" "${run[@]}" --threads 2 --resume "$t/ck4" --stop-at 11 --log "$t/r4_one.jsonl" --save-to "$t/r4_one" >/dev/null
"${mpi[@]}" -np 2 "$t/pp2" "${run[@]}" --resume "$t/ck4l" --stop-at 11 --log "$t/r4l_pp2.jsonl" --save-to "$t/r4l_pp2" >/dev/null
"${mpi[@]}" -np 4 "$t/pp4" "${run[@]}" --resume "$t/ck1" --stop-at 11 --log "$t/r1_pp4.jsonl" --save-to "$t/r1_pp4" >/dev/null
resumed "pp4 -> 1 rank:$t/r4_one.jsonl:$t/pp4.jsonl" "pp4 logical -> pp2:$t/r4l_pp2.jsonl:$t/pp4.jsonl" \
  "1 rank -> pp4:$t/r1_pp4.jsonl:$t/one.jsonl"
# a parameter outside the layers that every layer reads (tests/passes/pp_shared.model's `gate`): held
# on every stage, its gradient carried through each stage's backward loop and summed over the four
sm=(tests/passes/pp_shared.model -D seq=64 -D layers=4 -D batch=8)
"$shardc" build "${sm[@]}" -D micro_batch=8 --world 1 -o "$t/sone" 2>/dev/null
"$shardc" build "${sm[@]}" -D micro_batch=2 -D dp=1 -D pp=4 --world 4 -o "$t/spp4" 2>/dev/null
"$t/sone" "${run[@]}" --threads 2 --log "$t/sone.jsonl" >/dev/null
"${mpi[@]}" -np 4 "$t/spp4" "${run[@]}" --log "$t/spp4.jsonl" >/dev/null
compare "every layer reads gate, pp4" "$t/spp4.jsonl" "$t/sone.jsonl"
echo "pipeline parallelism: ok"
