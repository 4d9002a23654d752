#!/usr/bin/env bash
# ZeRO-Offload under `precision bf16` with the f32 master weights on the host (passes/zero.c, "the
# f32 master weights on the host") on the emulated CUDA device (labels cuda, e2e):
#
#   cuda_offload_master.sh SHARDC ST_CLOSE one | zero2 | zero3 | pp2z3
#
# The tiny GPT (seq 32) in bf16 with `offload`, compiled twice with the same plan: `weight_copy
# auto` (M: the masters on the host, the host casts each updated shard to bf16 and uploads it into
# the device's persistent copy) and `weight_copy per_layer` (L: the offload before it, the f32
# parameters on the device, downloaded and uploaded in f32 and cast per layer). 3 AdamW steps each,
# a logical checkpoint after every step. Both round the same f32 weights to bf16 (the host's
# rt_cvt_f32_bf16, the device's cast: nearest, ties to even), so they agree bit for bit: the same
# losses and byte-identical model and optimizer checkpoints after step 3. Cases:
#   one    one rank, 2 micro-steps a step; M's generated step downloads no parameter and casts the
#          16 updated parameters on the host (in its AdamW's pass: rt_adamw_f32_copy); `shardc plan` prints the masters in the host plan.
#          Resumes (the copies derived from the loaded masters): M from its own step-2 checkpoint
#          (step 3's loss and checkpoint byte-identical to the uninterrupted runs), the trainer
#          without offload (D) from M's step-2 checkpoint and M from D's: step 3's loss, computed
#          from the loaded weights, bit for bit the writer's, and the step-3 checkpoints within
#          st_close of the writer's (the host's AdamW against the device's); M and D initialised by
#          --init-from M's step-2 weights: the same first loss bit for bit, the second within 1e-6
#   zero2  dp 2 under mpirun, ZeRO 2 (each rank's half of the masters on the host, the bf16 halves
#          uploaded and gathered over dp); resumes across layouts: a one-rank trainer without
#          offload from M's step-2 checkpoint, and M from the one-rank trainer's (step 3's loss
#          within 1e-6 of the writer's: the same weights, the loss reduced over dp in another order);
#          and the one-rank trainer from M's sharded checkpoint (every rank's blocks of its masters)
#   zero3  dp 2, ZeRO 3 with 2 micro-steps a step (the masters' halves on the host, their bf16 casts
#          uploaded into the split copies that the layer loops gather); the same resumes as zero2
#   pp2z3  pp 2 x dp 2, ZeRO 3, 4 ranks (each stage's masters on its ranks' hosts; a small parameter
#          kept whole has its copy derived by a gather every rank joins): against the plan without
#          offload (pipeline stages refuse `weight_copy per_layer`), losses within 1e-6 and the
#          step-3 checkpoints within st_close's 1e-6 (the host's AdamW against the device's)
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
st_close=$(abspath "$2")
what=$3
corpus 20000
m=(models/tiny.model -D seq=32 -D precision=bf16 -D zero=1 -D offload=on)
np=1
case $what in
  one) plan=(-D micro_batch=4 -D batch=8) ;;
  zero2) plan=(-D micro_batch=4 -D dp=2 -D tp=1 -D zero=2) np=2 ;;
  zero3) plan=(-D micro_batch=2 -D batch=8 -D dp=2 -D tp=1 -D zero=3) np=2 ;;
  pp2z3) plan=(-D micro_batch=1 -D dp=2 -D pp=2 -D microbatches=2 -D tp=1 -D zero=3) np=4 ;;
  *) echo "usage: cuda_offload_master.sh SHARDC ST_CLOSE one|zero2|zero3|pp2z3" >&2; exit 2 ;;
esac
if [ "$what" = pp2z3 ]; then # (pipeline stages refuse `weight_copy per_layer`: against the plan without offload)
  export SHARDRT_DEVICE=emu
  launch=("${mpi[@]}" --oversubscribe -x SHARDRT_DEVICE -x SHARDRT_CUBIN_CACHE -np 4)
  run=(--data "$t/data.txt" --eval-every 0 --val-batches 1 --steps 3 --ckpt-format logical)
  for w in on off; do
    "$shardc" build "${m[@]}" "${plan[@]}" -D offload=$w --world 4 --target cuda -o "$t/$w" >/dev/null
    "${launch[@]}" "$t/$w" "${run[@]}" --log "$t/$w.jsonl" --save-to "$t/ck_$w" >"$t/$w.out" 2>&1 ||
      { cat "$t/$w.out"; fail "$what: offload $w"; }
  done
  "$shardc" plan "${m[@]}" "${plan[@]}" --world 4 --target cuda >"$t/plan.txt" 2>&1
  grep -q "parameters .*the f32 master weights" "$t/plan.txt" || fail "$what: shardc plan prints no host masters"
  paste <(losses "$t/on.jsonl") <(losses "$t/off.jsonl") | awk '
    { n++; d = $2 - $1; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r; if (r > 1e-6) bad++ }
    END { printf "pp2z3: losses with the masters on the host against no offload over %d steps: worst |rel| %.2e (tolerance 1e-6)\n", n, w
          if (n != 3 || bad) exit 1 }' || fail "$what: losses"
  for f in model optimizer; do
    printf "pp2z3, step 3 %s: " $f
    "$st_close" "$t/ck_off/step_00000003/$f.safetensors" "$t/ck_on/step_00000003/$f.safetensors" 1e-6 || fail "$what: $f after step 3"
  done
  echo "cuda offload master ($what): ok"
  exit 0
fi
launch=()
[ "$np" -gt 1 ] && launch=("${mpi[@]}" -x SHARDRT_DEVICE -x SHARDRT_CUBIN_CACHE -np "$np")
export SHARDRT_DEVICE=emu
run=(--data "$t/data.txt" --eval-every 0 --val-batches 1 --ckpt-every 1 --keep 3 --ckpt-format logical)
for w in auto per_layer; do
  "$shardc" build "${m[@]}" "${plan[@]}" -D weight_copy=$w --world "$np" --target cuda -o "$t/$w" >/dev/null
  "${launch[@]}" "$t/$w" "${run[@]}" --steps 3 --log "$t/$w.jsonl" --save-to "$t/ck_$w" >"$t/$w.out" 2>&1 ||
    { cat "$t/$w.out"; fail "$what: the $w trainer"; }
done
"$shardc" plan "${m[@]}" "${plan[@]}" --world "$np" --target cuda --emit-c "$t/src" >"$t/plan.txt" 2>&1
step=$(awk '/^static void step\(/,/^}/' "$t"/src/tiny.c)
downloads=$(awk '/rt_cu_launch|rt_cu_matmul/ { exit } /rt_cu_to_host_start/ { n++ } END { print n + 0 }' <<<"$step")
hcasts=$(grep -c 'rt_adamw_f32_copy(' <<<"$step" || true) # (the host's AdamW storing the bf16 copy it uploads)
ups=$(grep -c 'rt_cu_to_device_start(' <<<"$step" || true)
echo "$what: the step downloads $downloads parameters before its first kernel, casts $hcasts on the host, uploads $ups"
[ "$downloads" = 0 ] && [ "$hcasts" = 16 ] && [ "$ups" = 16 ] || fail "$what: the masters are not on the host"
grep -q "parameters .*the f32 master weights" "$t/plan.txt" || fail "$what: shardc plan prints no host masters"
la=$(losses "$t/auto.jsonl" | tr '\n' ' ') ll=$(losses "$t/per_layer.jsonl" | tr '\n' ' ')
[ "$(losses "$t/auto.jsonl" | wc -l)" = 3 ] && [ "$la" = "$ll" ] || fail "$what: losses $la (masters on the host) and $ll (on the device)"
for f in model.safetensors optimizer.safetensors; do
  cmp -s "$t/ck_auto/step_00000003/$f" "$t/ck_per_layer/step_00000003/$f" || fail "$what: $f differs after step 3"
done
echo "$what: masters on the host and on the device: losses $la, checkpoints after step 3 byte-identical"

# resume the trainer `bin` (launched by launch_$2) from checkpoint dir $3 (step 2) for step 3: its log and checkpoint
resume() {
  local bin=$1 np=$2 from=$3 name=$4 l=()
  [ "$np" -gt 1 ] && l=("${mpi[@]}" -x SHARDRT_DEVICE -x SHARDRT_CUBIN_CACHE -np "$np")
  mkdir -p "$t/from_$name"
  cp -r "$from/step_00000002" "$t/from_$name/"
  "${l[@]}" "$bin" "${run[@]}" --steps 3 --resume "$t/from_$name" --log "$t/$name.jsonl" --save-to "$t/ck_$name" \
    >"$t/$name.out" 2>&1 || { cat "$t/$name.out"; fail "$what: $name"; }
}
# step 3's loss of run $1 against $2's: bit for bit (tol 0) or within tol
same_loss() {
  local a b
  a=$(losses "$t/$1.jsonl" | tail -1) b=$(losses "$t/$2.jsonl" | tail -1)
  awk -v a="$a" -v b="$b" -v tol="$3" -v what="$what: $1 against $2" 'BEGIN {
    d = a - b; if (d < 0) d = -d; r = d / (b < 0 ? -b : b)
    printf "%s: step 3 loss %s against %s (|rel| %.2e, tolerance %g)\n", what, a, b, r, tol
    if ((tol == 0 && a != b) || r > tol) exit 1 }' || fail "$what: step 3's loss"
}
if [ "$what" = one ]; then
  resume "$t/auto" 1 "$t/ck_auto" self
  same_loss self auto 0
  for f in model.safetensors optimizer.safetensors; do
    cmp -s "$t/ck_self/step_00000003/$f" "$t/ck_auto/step_00000003/$f" || fail "resumed at step 2: $f differs after step 3"
  done
  "$shardc" build models/tiny.model -D seq=32 -D precision=bf16 "${plan[@]}" --world 1 --target cuda -o "$t/dev" >/dev/null
  "$t/dev" "${run[@]}" --steps 3 --log "$t/dev.jsonl" --save-to "$t/ck_dev" >"$t/dev.out" 2>&1 ||
    { cat "$t/dev.out"; fail "the trainer without offload"; }
  resume "$t/dev" 1 "$t/ck_auto" dev_from_offload
  same_loss dev_from_offload auto 0
  resume "$t/auto" 1 "$t/ck_dev" offload_from_dev
  same_loss offload_from_dev dev 0
  # --init-from (the weights only, fresh moments, the data from the start): M and D from M's step-2
  # model, 2 steps: the first loss (the loaded weights) bit for bit, the second within 1e-6
  for b in auto dev; do
    "$t/$b" "${run[@]}" --steps 2 --init-from "$t/ck_auto/step_00000002/model.safetensors" --log "$t/init_$b.jsonl" \
      --save-to "" >"$t/init_$b.out" 2>&1 || { cat "$t/init_$b.out"; fail "--init-from ($b)"; }
  done
  paste <(losses "$t/init_auto.jsonl") <(losses "$t/init_dev.jsonl") | awk '
    { n++; d = $2 - $1; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (n == 1 && $1 != $2) bad++; if (r > 1e-6) bad++
      printf "--init-from, step %d: loss %s with offload, %s without (|rel| %.2e)\n", n, $1, $2, r }
    END { if (n != 2 || bad) exit 1 }' || fail "--init-from: offload and no offload differ"
  for f in model optimizer; do
    printf "no offload from offload, step 3 %s: " $f
    "$st_close" "$t/ck_auto/step_00000003/$f.safetensors" "$t/ck_dev_from_offload/step_00000003/$f.safetensors" 1e-6 ||
      fail "no offload resumed from offload: $f after step 3"
    printf "offload from no offload, step 3 %s: " $f
    "$st_close" "$t/ck_dev/step_00000003/$f.safetensors" "$t/ck_offload_from_dev/step_00000003/$f.safetensors" 1e-6 ||
      fail "offload resumed from no offload: $f after step 3"
  done
else
  "$shardc" build models/tiny.model -D seq=32 -D precision=bf16 -D micro_batch=8 --world 1 --target cuda -o "$t/one" >/dev/null
  "$t/one" "${run[@]}" --steps 3 --log "$t/one.jsonl" --save-to "$t/ck_one" >"$t/one.out" 2>&1 ||
    { cat "$t/one.out"; fail "the one-rank trainer"; }
  resume "$t/one" 1 "$t/ck_auto" one_from_offload
  same_loss one_from_offload auto 1e-6
  resume "$t/auto" 2 "$t/ck_one" offload_from_one
  same_loss offload_from_one one 1e-6
  if [ "$what" = zero2 ]; then # sharded checkpoints (each rank writes its blocks of the host masters)
    "${launch[@]}" "$t/auto" "${run[@]/logical/sharded}" --steps 2 --log "$t/sh.jsonl" --save-to "$t/ck_sh" >"$t/sh.out" 2>&1 ||
      { cat "$t/sh.out"; fail "$what: sharded checkpoints"; }
    resume "$t/one" 1 "$t/ck_sh" one_from_sharded
    same_loss one_from_sharded auto 1e-6
  fi
fi
echo "cuda offload master ($what): ok"
