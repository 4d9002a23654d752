#!/usr/bin/env bash
# The weights' persistent bf16 copies (passes/wshadow.c) on the emulated CUDA device (labels cuda, e2e):
#
#   cuda_wshadow.sh SHARDC one | zero1 | zero2 | sgd
#
# The tiny GPT (seq 32) under `precision bf16`, compiled twice with the same plan, `-D
# weight_copy=persistent` and `-D weight_copy=per_layer`, 3 AdamW steps each on the emulated device
# (SHARDRT_DEVICE=emu), a checkpoint after every step. The two programs round the same f32 weights to
# bf16 (the update's kernel storing the copy, against a cast per loop and micro-step), so they must
# agree bit for bit: the same losses in the logs and byte-identical model and optimizer checkpoints
# after step 3 (the copies are not in them). Cases:
#   one    one rank, 2 micro-steps a step (gradient accumulation); and a resume: the persistent
#          trainer restarted from its step-2 checkpoint (its copies made again from the loaded
#          parameters) writes the same step-3 loss and checkpoint as the uninterrupted runs
#   zero1  dp 2 under mpirun, ZeRO 1: persistent stores the f32 masters split and gathers the copies
#          (passes/zero_master.c: each rank's update casts its shard, an all-gather of the bf16
#          shards writes the copy), per_layer keeps the whole f32 parameters (the updated shard
#          gathered, cast where read); logical checkpoints; and the checkpoints across stages: a
#          zero 0 trainer resumed from persistent's step-2 checkpoint (sharded), and
#          persistent from the zero 0 trainer's (sharded), write the same step-3 loss and checkpoint
#          as the uninterrupted runs
#   zero2  the same with ZeRO 2 (gradients reduce-scattered), across stages with zero 3
#   sgd    one rank, SGD with momentum (its kernel storing the copy too)
# Also checked: the persistent program's AdamW kernels store the copies (the casts fused into them)
# and the per-layer one has no copy; `shardc plan` names the decision.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
what=$2
corpus 20000
m=(models/tiny.model -D seq=32 -D precision=bf16)
np=1
case $what in
  one) plan=(-D micro_batch=4 -D batch=8) ;;
  zero1) plan=(-D micro_batch=4 -D dp=2 -D tp=1 -D zero=1) np=2 ;;
  zero2) plan=(-D micro_batch=4 -D dp=2 -D tp=1 -D zero=2) np=2 ;;
  sgd) plan=(-D micro_batch=4 -D batch=4 -D optimizer=sgd -D momentum=0.9) ;;
  *) echo "usage: cuda_wshadow.sh SHARDC one|zero1|zero2|sgd" >&2; exit 2 ;;
esac
launch=()
[ "$np" -gt 1 ] && launch=("${mpi[@]}" -x SHARDRT_DEVICE -x SHARDRT_CUBIN_CACHE -np "$np")
export SHARDRT_DEVICE=emu
run=(--data "$t/data.txt" --eval-every 0 --val-batches 1 --ckpt-every 1 --keep 3 --ckpt-format logical)
for w in persistent per_layer; do
  "$shardc" build "${m[@]}" "${plan[@]}" -D weight_copy=$w --world "$np" --target cuda -o "$t/$w" >/dev/null
  "$shardc" plan "${m[@]}" "${plan[@]}" -D weight_copy=$w --world "$np" --target cuda --emit-c "$t/src_$w" >/dev/null 2>&1
  "${launch[@]}" "$t/$w" "${run[@]}" --steps 3 --log "$t/$w.jsonl" --save-to "$t/ck_$w" >"$t/$w.out" 2>&1 ||
    { cat "$t/$w.out"; fail "$what: the $w trainer"; }
done
fused=$(cat "$t"/src_persistent/*.c | grep -c "stored by the update above" || true)
nofuse=$(cat "$t"/src_per_layer/*.c | grep -c "stored by the update above" || true)
# each update's kernel stores its copy (under ZeRO the cast of its shard, then gathered)
want=16
[ "$fused" = "$want" ] && [ "$nofuse" = 0 ] || fail "$what: $fused AdamW kernels store a copy (want $want), $nofuse per layer"
lp=$(losses "$t/persistent.jsonl" | tr '\n' ' ') ll=$(losses "$t/per_layer.jsonl" | tr '\n' ' ')
[ "$(losses "$t/persistent.jsonl" | wc -l)" = 3 ] && [ "$lp" = "$ll" ] || fail "$what: losses $lp (persistent) and $ll (per layer)"
for f in model.safetensors optimizer.safetensors; do
  cmp -s "$t/ck_persistent/step_00000003/$f" "$t/ck_per_layer/step_00000003/$f" || fail "$what: $f differs after step 3"
done
if grep -aq '"bf16:' "$t/ck_persistent/step_00000003/model.safetensors" "$t/ck_persistent/step_00000003/optimizer.safetensors"; then
  fail "$what: a copy in the checkpoint"
fi
echo "$what: persistent and per-layer copies: losses $lp, checkpoints after step 3 byte-identical; $fused updates store their copy"
if [ "$what" = one ]; then
  mkdir -p "$t/from2"
  cp -r "$t/ck_persistent/step_00000002" "$t/from2/"
  "$t/persistent" "${run[@]}" --steps 3 --resume "$t/from2" --log "$t/resumed.jsonl" --save-to "$t/ck_resumed" \
    >"$t/resumed.out" 2>&1 || { cat "$t/resumed.out"; fail "the resumed persistent trainer"; }
  lr=$(losses "$t/resumed.jsonl" | tail -1) l3=$(losses "$t/per_layer.jsonl" | tail -1)
  [ "$lr" = "$l3" ] || fail "resumed at step 2: step 3's loss $lr, uninterrupted $l3"
  for f in model.safetensors optimizer.safetensors; do
    cmp -s "$t/ck_resumed/step_00000003/$f" "$t/ck_per_layer/step_00000003/$f" || fail "resumed at step 2: $f differs after step 3"
  done
  echo "resumed from step 2 with persistent copies: step 3 loss $lr and checkpoint byte-identical to the uninterrupted runs"
  out=$("$shardc" plan "${m[@]}" "${plan[@]}" --world 1 --target cuda 2>&1)
  grep -q "bf16 weights .*persistent copies" <<<"$out" || fail "shardc plan does not name the decision"
fi
if [ "$what" = zero1 ] || [ "$what" = zero2 ]; then
  # checkpoints across stages: persistent's step-2 checkpoint resumed by another stage, and the other
  # stage's own step-2 checkpoint resumed by persistent
  other=0
  [ "$what" = zero2 ] && other=3
  op=("${plan[@]/zero=?/zero=$other}")
  "$shardc" build "${m[@]}" "${op[@]}" --world "$np" --target cuda -o "$t/other" >/dev/null
  # (sharded checkpoints here: every rank its blocks, the split masters' included)
  "${launch[@]}" "$t/other" "${run[@]}" --ckpt-format sharded --steps 2 --log "$t/other.jsonl" --save-to "$t/ck_other" \
    >"$t/other.out" 2>&1 || { cat "$t/other.out"; fail "$what: the zero $other trainer"; }
  "${launch[@]}" "$t/persistent" "${run[@]}" --ckpt-format sharded --steps 2 --log "$t/psh.jsonl" --save-to "$t/ck_psh" \
    >"$t/psh.out" 2>&1 || { cat "$t/psh.out"; fail "$what: the persistent trainer, sharded checkpoints"; }
  l3=$(losses "$t/per_layer.jsonl" | tail -1)
  for dir in psh:other other:persistent; do
    from=${dir%%:*} to=${dir##*:}
    rm -rf "$t/from2" "$t/ck_x"; mkdir -p "$t/from2"
    cp -r "$t/ck_$from/step_00000002" "$t/from2/"
    "${launch[@]}" "$t/$to" "${run[@]}" --steps 3 --resume "$t/from2" --log "$t/x.jsonl" --save-to "$t/ck_x" \
      >"$t/x.out" 2>&1 || { cat "$t/x.out"; fail "$what: $to resumed from $from"; }
    lr=$(losses "$t/x.jsonl" | tail -1)
    [ "$lr" = "$l3" ] || fail "$what: $to (zero $other: other) resumed from $from's step 2: step 3's loss $lr, uninterrupted $l3"
    for f in model.safetensors optimizer.safetensors; do
      cmp -s "$t/ck_x/step_00000003/$f" "$t/ck_per_layer/step_00000003/$f" || fail "$what: $to resumed from $from: $f differs after step 3"
    done
  done
  echo "$what: across stages (zero $other <-> split masters): step 3 loss $l3 and checkpoint byte-identical to the uninterrupted runs"
  out=$("$shardc" plan "${m[@]}" "${plan[@]}" --world "$np" --target cuda 2>&1)
  grep -q "f32 masters .*saved" <<<"$out" || fail "shardc plan does not print the f32 masters saved"
fi
