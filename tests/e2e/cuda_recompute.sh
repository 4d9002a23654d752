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
set -euo pipefail
shardc=$(realpath "$1")
cd "$(dirname "$0")/../.."
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
bash scripts/gen_corpus.sh "$t/data.txt" 30000 3 >/dev/null
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
for r in none selective full; do
  "$shardc" build models/tiny.model -D seq=32 -D micro_batch=8 -D dp=1 -D tp=2 -D sp=on -D precision=bf16 \
    -D recompute="$r" --world 2 --target cuda -o "$t/t_$r" >"$t/build.out" 2>&1 || { cat "$t/build.out"; exit 1; }
  SHARDRT_DEVICE=emu mpirun --mca pml ob1 -x SHARDRT_DEVICE -np 2 "$t/t_$r" --data "$t/data.txt" --steps 2 \
    --eval-every 0 --val-batches 1 --log "$t/$r.jsonl" --save-to "$t/ck_$r" --ckpt-format logical >"$t/$r.out" 2>&1 ||
    { cat "$t/$r.out"; echo "FAIL: recompute $r"; exit 1; }
done
[ "$(losses "$t/none.jsonl" | wc -l)" = 2 ] || { echo "FAIL: $(losses "$t/none.jsonl" | wc -l) steps logged, want 2"; exit 1; }
for r in selective full; do
  [ "$(losses "$t/none.jsonl")" = "$(losses "$t/$r.jsonl")" ] || {
    paste <(losses "$t/none.jsonl") <(losses "$t/$r.jsonl"); echo "FAIL: recompute $r: losses differ"; exit 1; }
  for f in model.safetensors optimizer.safetensors; do
    cmp -s "$t/ck_none/step_00000002/$f" "$t/ck_$r/step_00000002/$f" || { echo "FAIL: recompute $r: $f differs"; exit 1; }
  done
done
echo "cuda recompute (emulated device, tp 2 + sp, bf16): selective and full bit-identical to none over 2 steps"
