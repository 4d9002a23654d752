#!/usr/bin/env bash
# `on_nonfinite skip` (passes/optimizer.c gates the update; runtime/train/main.c counts the skips):
# a step whose gradients turn NaN (the SHARDRT_FAULT_NAN hook, runtime/train/fault.c) is skipped
# on every rank and training goes on (labels mpi, e2e).
#
#   skip.sh SHARDC ST_CLOSE        the CPU target: one rank with 2 accumulation micro-steps, and
#                                  dp=2 x tp=2 with zero 1 and 2 micro-steps under mpirun (the NaN
#                                  on rank 1 only); the consecutive-skip limit; the flags' errors
#   skip.sh SHARDC ST_CLOSE cuda   the CUDA target on the emulated device: dp=2 x zero 1 under mpirun, f32
#                                  and bf16 with the weights' persistent copies
#
# What is asserted: the skipped step's checkpoint holds exactly the tensors (parameters, AdamW
# moments) of the step before it, while the next step's differs (the comparison can fail); the
# optimizer's step and the learning rate do not advance (the step's "step" and "lr" inputs in
# --dump-steps); the log marks that step only; a resume from the skipped step's checkpoint gives
# the uninterrupted run's later losses bit-identically; dp2 x tp2 x zero 1 gives the one-rank
# losses within 1e-5 relative (layouts.sh's tolerance); more consecutive skips than max_skips stop
# the run with status 1 and no checkpoint of that state.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
st_close=$(abspath "$2")
mode=${3:-cpu}
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh

m=(models/tiny.model -D seq=32 -D on_nonfinite=skip)
flags=(--data "$t/data.txt" --eval-every 0 --val-batches 1 --keep 0 --ckpt-every 1)

# same_tensors A B: every tensor of two checkpoint directories equal (st_close, tolerance 0)
same_tensors() {
  local f
  for f in "$1"/*.safetensors; do "$st_close" "$f" "$2/${f##*/}" 0 >/dev/null 2>&1 || return 1; done
}
# input DUMP NAME: a scalar tensor of a --dump-steps file
input() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])[sys.argv[2]]
o = h["data_offsets"][0]
print(struct.unpack("<f", b[8 + n + o:8 + n + o + 4])[0])
PY
}
# check_skip LOG CKDIR [S]: step S (default 3) alone skipped, its checkpoint = step S-1's, step S+1's differs
check_skip() {
  local n k=${3:-3}
  n=$(grep -c '"skipped":true' "$1" || true)
  [ "$n" = 1 ] && grep "\"step\":$k," "$1" | grep -q '"skipped":true,"skipped_steps":1' || fail "$1: want step $k alone skipped"
  grep "\"step\":$k," "$1" | grep -q '"loss":null' || fail "$1: step $k's loss is not NaN (null)"
  same_tensors "$2/step_0000000$((k - 1))" "$2/step_0000000$k" || fail "$2: the skipped step changed a tensor"
  ! same_tensors "$2/step_0000000$k" "$2/step_0000000$((k + 1))" || fail "$2: step $((k + 1)) changed nothing"
  grep -aq '"skipped_steps":"1"' "$2/step_0000000$k"/*.safetensors || fail "$2: step $k's checkpoint does not count the skip"
}

if [ "$mode" = cuda ]; then
  "$shardc" build "${m[@]}" -D micro_batch=2 -D dp=2 -D zero=1 --world 2 --target cuda -o "$t/cu" >/dev/null 2>&1
  SHARDRT_DEVICE=emu SHARDRT_FAULT_NAN=2:wte:1 "${mpi[@]}" -np 2 "$t/cu" "${flags[@]}" --steps 3 --save-to "$t/ck_cu" \
    --log "$t/cu.jsonl" >"$t/cu.out" 2>&1 || { cat "$t/cu.out"; fail "the emulated-device run failed"; }
  check_skip "$t/cu.jsonl" "$t/ck_cu" 2
  echo "cuda (emulated device), dp=2 x zero 1, the NaN on rank 1 only: step 2 skipped on both, its checkpoint equal to step 1's"
  # bf16 with the weights' persistent copies (passes/wshadow.c): compute reads wte's bf16 copy, which the
  # fault makes again from the poisoned parameter (and after the step from the restored one)
  "$shardc" build "${m[@]}" -D micro_batch=2 -D dp=2 -D zero=1 -D precision=bf16 -D weight_copy=persistent --world 2 \
    --target cuda -o "$t/cub" >/dev/null 2>&1
  SHARDRT_DEVICE=emu SHARDRT_FAULT_NAN=2:wte:1 "${mpi[@]}" -np 2 "$t/cub" "${flags[@]}" --steps 3 --save-to "$t/ck_cub" \
    --log "$t/cub.jsonl" >"$t/cub.out" 2>&1 || { cat "$t/cub.out"; fail "the emulated-device bf16 run failed"; }
  check_skip "$t/cub.jsonl" "$t/ck_cub" 2
  echo "cuda bf16 with persistent weight copies: the same"
  exit 0
fi

# one rank, batch 16 in 2 micro-steps of 8
"$shardc" build "${m[@]}" -D batch=16 -D micro_batch=8 --world 1 -o "$t/one" >/dev/null 2>&1
SHARDRT_FAULT_NAN=3:wte "$t/one" "${flags[@]}" --steps 8 --threads 2 --save-to "$t/ck1" --log "$t/one.jsonl" \
  --dump-steps 5 --dump-to "$t/d" >"$t/one.out" 2>&1 || { cat "$t/one.out"; fail "the one-rank run failed"; }
check_skip "$t/one.jsonl" "$t/ck1"
grep -q "^warning: step 3 skipped: the gradient norm is NaN (loss NaN); no parameter or optimizer state changed and the optimizer stays at step 2 (1 skipped in a row, at most 5)$" "$t/one.out" ||
  { cat "$t/one.out"; fail "no warning naming the skipped step"; }
# the optimizer's step (AdamW's bias correction) and the schedule stay put across the skipped step
st=$(for s in 2 3 4 5; do input "$t/d/step_$s.safetensors" step; done | tr '\n' ' ')
[ "$st" = "2.0 3.0 3.0 4.0 " ] || fail "the optimizer's step over steps 2..5 is '$st', want '2.0 3.0 3.0 4.0 '"
[ "$(input "$t/d/step_3.safetensors" lr)" = "$(input "$t/d/step_4.safetensors" lr)" ] || fail "the lr advanced over the skip"
# a resume from the skipped step's checkpoint continues the run bit-identically
"$t/one" "${flags[@]}" --steps 8 --threads 2 --resume "$t/ck1/step_00000003" --save-to '' --log "$t/one_r.jsonl" >/dev/null 2>&1
[ "$(losses "$t/one_r.jsonl")" = "$(losses "$t/one.jsonl" | tail -n 5)" ] || fail "the resume after the skip changed losses 4..8"
echo "one rank (2 micro-steps): step 3 skipped, parameters and moments unchanged, optimizer step held, resume bit-identical"

# dp=2 x tp=2, zero 1, 2 micro-steps of 4: the NaN on rank 1 only, every rank skips
"$shardc" build "${m[@]}" -D batch=16 -D micro_batch=4 -D dp=2 -D tp=2 -D zero=1 --world 4 -o "$t/z1" >/dev/null 2>&1
SHARDRT_FAULT_NAN=3:wte:1 "${mpi[@]}" -np 4 "$t/z1" "${flags[@]}" --steps 8 --save-to "$t/ck4" --log "$t/z1.jsonl" \
  >"$t/z1.out" 2>&1 || { cat "$t/z1.out"; fail "the dp2 x tp2 run failed"; }
check_skip "$t/z1.jsonl" "$t/ck4"
paste <(losses "$t/one.jsonl") <(losses "$t/z1.jsonl") | awk '
  $1 == "null" { if ($2 != "null") bad = 1; next }
  { d = $2 - $1; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r; n++ }
  END { printf "dp2 x tp2 x zero 1: worst |rel| loss difference vs 1 rank over %d steps: %.2e\n", n, w
        exit (bad || n != 7 || w > 1e-5) }' || fail "dp2 x tp2 x zero 1 departs from one rank"
"${mpi[@]}" -np 4 "$t/z1" "${flags[@]}" --steps 8 --resume "$t/ck4/step_00000003" --save-to '' --log "$t/z1_r.jsonl" >/dev/null 2>&1
[ "$(losses "$t/z1_r.jsonl")" = "$(losses "$t/z1.jsonl" | tail -n 5)" ] || fail "dp2 x tp2: the resume after the skip changed losses"
echo "dp2 x tp2 x zero 1 (NaN on rank 1 only): every rank skipped step 3, resume bit-identical"

# pp=2 with the NaN on the last stage only (the tied lm head's wte: stage 0 never sees it), and
# zero 3 (the parameters themselves sharded over dp): every stage and shard skips
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=1 -D pp=2 -D microbatches=2 --world 2 -o "$t/pp2" >/dev/null 2>&1
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=2 -D zero=3 --world 2 -o "$t/z3" >/dev/null 2>&1
for c in pp2 z3; do
  SHARDRT_FAULT_NAN=3:wte:1 "${mpi[@]}" -np 2 "$t/$c" "${flags[@]}" --steps 4 --save-to "$t/ck_$c" --log "$t/$c.jsonl" \
    >"$t/$c.out" 2>&1 || { cat "$t/$c.out"; fail "the $c run failed"; }
  check_skip "$t/$c.jsonl" "$t/ck_$c"
done
echo "pp=2 (NaN on the last stage only) and zero 3 dp=2: every rank skipped step 3"

# more consecutive skips than max_skips: a learning rate that blows the weights up
"$shardc" build "${m[@]}" -D micro_batch=8 -D lr=1e5 -D grad_clip=0 -D max_skips=2 --world 1 -o "$t/hot" >/dev/null 2>&1
rc=0
"$t/hot" "${flags[@]}" --steps 20 --threads 2 --save-to "$t/ckh" >"$t/hot.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat "$t/hot.out"; fail "the run past max_skips exited $rc, want 1"; }
grep -q "^error: step 4: the gradient norm is Inf (loss .*): 3 steps in a row with non-finite gradients, more than the 2 that may be skipped (max_skips): training diverged; stopping without writing a checkpoint of this state (the newest checkpoint is '$t/ckh/step_00000003'" "$t/hot.out" ||
  { cat "$t/hot.out"; fail "the max_skips message"; }
[ ! -e "$t/ckh/step_00000004" ] || fail "a checkpoint was written past max_skips"
echo "max_skips 2: the third skip in a row stops the run (status 1)"

# the trainer's flags: skip needs a gated program; --max-skips needs skip
"$shardc" build models/tiny.model -D seq=32 -D micro_batch=8 --world 1 -o "$t/stop" >/dev/null 2>&1
rc=0; "$t/stop" --on-nonfinite skip "${flags[@]}" --steps 1 >"$t/f.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "compiled with \`on_nonfinite stop\`" "$t/f.out" || fail "--on-nonfinite skip on a stop program"
rc=0; "$t/one" --on-nonfinite stop --max-skips 3 "${flags[@]}" --steps 1 >"$t/f.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "^error: --max-skips 3: steps are skipped only with --on-nonfinite skip" "$t/f.out" || fail "--max-skips without skip"
rc=0; "$t/one" --on-nonfinite maybe "${flags[@]}" --steps 1 >"$t/f.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "'maybe' is neither stop nor skip" "$t/f.out" || fail "--on-nonfinite maybe"
# --on-nonfinite stop on a skip program: the run stops at the NaN step (and its update was not applied)
rc=0; SHARDRT_FAULT_NAN=2:wte "$t/one" --on-nonfinite stop "${flags[@]}" --steps 3 --threads 2 --save-to "$t/cks" >"$t/f.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "^error: step 2: the loss is NaN (gradient norm NaN): training diverged" "$t/f.out" || { cat "$t/f.out"; fail "--on-nonfinite stop"; }
echo "flags: --on-nonfinite / --max-skips refused where they cannot apply"
# the recipe: max_skips without on_nonfinite skip is refused at the field (not ignored)
printf 'model m {\n  param w : [4]\n  loss = sum(w)\n}\ntrain {\n  max_skips 3\n}\n' >"$t/ms.model"
rc=0; "$shardc" plan "$t/ms.model" --world 1 >"$t/ms.out" 2>&1 || rc=$?
[ "$rc" != 0 ] && grep -q "ms.model:6:3: error: \`max_skips\` bounds the steps skipped by \`on_nonfinite skip\`" "$t/ms.out" ||
  { cat "$t/ms.out"; fail "max_skips without skip"; }
"$shardc" plan "$t/ms.model" -D on_nonfinite=skip --world 1 2>&1 | grep -q "on_nonfinite skip max_skips 3" ||
  fail "on_nonfinite skip with max_skips 3 is not in the plan's recipe"
echo "recipe: max_skips without skip refused at the field"
