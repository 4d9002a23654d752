#!/usr/bin/env bash
# Activation recompute on the CUDA target (labels cuda, mpi): the tiny GPT (seq 32) in bf16 on
# tp 2 + sp, 2 ranks under mpirun on the emulated device (SHARDRT_DEVICE=emu: the generated kernels,
# fused elementwise groups included, on the CPU emulator), built with recompute none, selective and
# full: 2 AdamW steps give bit-identical losses and checkpoints (the recomputed values are the same
# kernels on the same values, so nothing may differ, not even in bf16). Step 1 recomputes from the
# initial weights, step 2 from updated ones with Adam's moments live: a recompute that read a value
# saved by the step before would differ there (a third step, run before 2026-11-26, proved nothing more).
# What each build proves: none is the reference (every activation kept); selective recomputes
# attention (sdpa) and the cheap ops around it (elementwise, rope, copies) in the backward loop: the
# flash attention forward and fused elementwise kernels run again, some as kernels of their own where
# the forward ran them in a GEMM epilogue (bit-identical on the emulated device only: docs/cuda.md);
# full re-runs each layer's whole forward from its carried input, its tp + sp collectives included
# (passes/recompute.c).
#
#   cuda_recompute.sh SHARDC
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
corpus 30000
# modes TAG NP DEFS...: tiny built with DEFS under recompute none, selective and full on NP ranks, 2 steps each on the
# emulated device; selective's and full's losses and checkpoints must be none's, bit for bit
modes() {
  local tag=$1 np=$2 r f
  shift 2
  for r in none selective full; do
    "$shardc" build models/tiny.model -D seq=32 -D micro_batch=8 -D dp=1 -D precision=bf16 "$@" -D recompute="$r" \
      --world "$np" --target cuda -o "$t/${tag}_$r" >"$t/build.out" 2>&1 || { cat "$t/build.out"; exit 1; }
    SHARDRT_DEVICE=emu "${mpi[@]}" -x SHARDRT_DEVICE -np "$np" "$t/${tag}_$r" --data "$t/data.txt" --steps 2 \
      --eval-every 0 --val-batches 1 --log "$t/$tag$r.jsonl" --save-to "$t/ck${tag}_$r" --ckpt-format logical \
      >"$t/$tag$r.out" 2>&1 || { cat "$t/$tag$r.out"; fail "$tag: recompute $r"; }
  done
  [ "$(losses "$t/${tag}none.jsonl" | wc -l)" = 2 ] || fail "$tag: $(losses "$t/${tag}none.jsonl" | wc -l) steps logged, want 2"
  for r in selective full; do
    [ "$(losses "$t/${tag}none.jsonl")" = "$(losses "$t/$tag$r.jsonl")" ] || {
      paste <(losses "$t/${tag}none.jsonl") <(losses "$t/$tag$r.jsonl"); fail "$tag: recompute $r: losses differ"; }
    for f in model.safetensors optimizer.safetensors; do
      cmp -s "$t/ck${tag}_none/step_00000002/$f" "$t/ck${tag}_$r/step_00000002/$f" || fail "$tag: recompute $r: $f differs"
    done
  done
}
modes tp2 2 -D tp=2 -D sp=on
echo "cuda recompute (emulated device, tp 2 + sp, bf16): selective and full bit-identical to none over 2 steps"
# One rank, tp 1: every GEMM epilogue (passes/epilogue.c: the bias, GELU and residual adds in the forward's GEMMs,
# GELU's backward in the incoming gradient's). Selective keeps the adds those epilogues store (passes/recompute.c
# epi_keep), full makes GELU's pre-activation before the DGELU GEMM (dgelu_first), whose output GELU's backward
# writes in place (passes/memplan.c): the same losses and checkpoints as none, bit for bit.
modes tp1 1 -D tp=1
echo "cuda recompute (emulated device, tp 1, bf16, every GEMM epilogue): selective and full bit-identical to none over 2 steps"
# pp 2 zero-bubble, f32, 2 micro-batches (tests/e2e/zb_dgelu.model: RMSNorm, GQA, a GELU MLP without biases): B
# under recompute full re-runs each layer's forward after the GEMM of the incoming gradient, whose GELU-backward
# epilogue (passes/epilogue.c) read the MLP's pre-activation before the recompute made it (the micro-batch before's
# bytes; found by scripts/fuzz_runs.sh, seed 20400598; step 2's loss 5.46204567 for 5.46214676; since session 41 the
# recompute makes it before that GEMM, passes/recompute.c dgelu_first): full must equal none, whose pre-activation is
# the forward's, saved
for r in none full; do
  "$shardc" build tests/e2e/zb_dgelu.model -D micro_batch=2 -D batch=4 -D dp=1 -D pp=2 -D schedule=zb \
    -D recompute="$r" --world 2 --target cuda -o "$t/z_$r" >"$t/build.out" 2>&1 || { cat "$t/build.out"; exit 1; }
  SHARDRT_DEVICE=emu "${mpi[@]}" -x SHARDRT_DEVICE -np 2 "$t/z_$r" --data "$t/data.txt" --steps 3 \
    --eval-every 0 --val-batches 1 --log "$t/z$r.jsonl" >"$t/z$r.out" 2>&1 || { cat "$t/z$r.out"; fail "pp 2 zb recompute $r"; }
done
[ "$(losses "$t/znone.jsonl" | wc -l)" = 3 ] && [ "$(losses "$t/znone.jsonl")" = "$(losses "$t/zfull.jsonl")" ] || {
  paste <(losses "$t/znone.jsonl") <(losses "$t/zfull.jsonl"); fail "pp 2 zb: recompute full's losses differ from none's"; }
echo "cuda recompute (emulated device, pp 2 zb, f32): full bit-identical to none over 3 steps"
