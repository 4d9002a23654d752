#!/usr/bin/env bash
# GEMM epilogues on the CUDA target against the unfused program (labels cuda, e2e): the tiny GPT in
# bf16 (all 5 epilogues of passes/epilogue.c: bias, bias + residual twice, bias + GELU, GELU's
# backward with the bias gradient) on the emulated device, 2 AdamW steps each:
#   - fused (the default: GELU's backward in the GEMM, DGELU, and its bias gradient by the
#     program's column reduction, RT_CU_EP_NO_BGRAD: SHARDRT_GEMM_BGRAD=split);
#   - bgrad: SHARDRT_GEMM_BGRAD=fused, the bias gradient in the GEMM too (DGELU_BGRAD);
#   - tuned: SHARDRT_GEMM_AUTOTUNE=8, the autotuning's candidate loop at every GEMM's first call
#     (the emulated device has one algorithm): byte-identical to fused (the timing runs left what
#     the real calls read alone: in-place residuals) and its summary line printed;
#   - SHARDRT_EMU_NO_EPILOGUE=all: the device has no algorithm for any epilogue, as when cuBLASLt's
#     heuristic finds none, so every such GEMM runs as the plain GEMM and the unfused kernels
#     (rt_cu_matmul_ep's fallback), with one note per GEMM;
#   - SHARDRT_EMU_NO_EPILOGUE=BIAS,BIAS_RESIDUAL,GELU_AUX_BIAS: only the forward's fall back.
# And a Llama-shaped model in bf16 (no biases: the residual adds without a bias, RESIDUAL, in 5 GEMMs
# of a layer: the forward's two residuals (its selective recompute keeps their sums, passes/recompute.c),
# the backward's three dX sums, the later dX GEMM accumulating onto the earlier one's result), fused
# against SHARDRT_EMU_NO_EPILOGUE=RESIDUAL (one note per GEMM's source line: 4): byte-identical losses
# and checkpoints.
# The emulated epilogues compute what the nodes they replace compute, rounding included, so the
# forward fallback and the whole fallback must give byte-identical losses and checkpoints to fused.
# With DGELU_BGRAD (bgrad), the MLP's first bias gradient is summed in another order (the emulated
# epilogue's double sum against the reduce kernel's), which may move it by a bf16 rounding: the
# step-1 loss (before any update) must be byte-identical to the fallback's, the step-2 loss within
# 1e-5 relative, and the checkpoints within 3e-4 absolute (2 (lr_1 + lr_2): an AdamW step moves a
# parameter by about lr at most; st_close). Measured on the emulated device: byte-identical.
#
#   cuda_epilogue_fallback.sh SHARDC ST_CLOSE
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
st_close=$(abspath "$2")
corpus 30000
"$shardc" build models/tiny.model -D seq=16 -D micro_batch=4 -D dp=1 -D precision=bf16 --world 1 --target cuda \
  -o "$t/tb" >"$t/build.out" 2>&1 || { cat "$t/build.out"; exit 1; }
run() { # name, SHARDRT_EMU_NO_EPILOGUE, SHARDRT_GEMM_BGRAD, SHARDRT_GEMM_AUTOTUNE (the trainer: $bin, else tiny's)
  SHARDRT_DEVICE=emu SHARDRT_EMU_NO_EPILOGUE="$2" SHARDRT_GEMM_BGRAD="${3:-}" SHARDRT_GEMM_AUTOTUNE="${4:-}" "${bin:-$t/tb}" --data "$t/data.txt" --steps 2 --eval-every 0 --val-batches 1 \
    --log "$t/$1.jsonl" --save-to "$t/ck_$1" --ckpt-format logical >"$t/$1.out" 2>&1 || { cat "$t/$1.out"; fail "$1"; }
}
run fused ""
run bgrad "" fused
rm -f "${SHARDRT_CUBIN_CACHE:-$HOME/.cache/shardc/cubin}"/gemm-tune-*.txt # the tuned run times (an earlier run's record is taken untimed)
run tuned "" "" 8
run all all
run fwd BIAS,BIAS_RESIDUAL,GELU_AUX_BIAS
[ "$(losses "$t/fused.jsonl" | wc -l)" = 2 ] || fail "$(losses "$t/fused.jsonl" | wc -l) steps logged, want 2"
notes() { grep -c "^note: rank 0: the emulated device has no algorithm for the GEMM at .* with epilogue $2;" "$t/$1.out" || true; }
for r in fused bgrad tuned; do
  [ "$(grep -c '^note: .*no algorithm' "$t/$r.out" || true)" = 0 ] || fail "the $r run fell back"
done
for want in "all:BIAS:1" "all:BIAS_RESIDUAL:2" "all:GELU_AUX_BIAS:1" "all:DGELU_BGRAD or DGELU:1" "fwd:BIAS_RESIDUAL:2" \
  "fwd:DGELU_BGRAD or DGELU:0"; do
  IFS=: read -r -a f <<<"$want"
  set -- "${f[@]}"
  [ "$(notes "$1" "$2")" = "$3" ] || { grep note "$t/$1.out" || true; fail "$1: $(notes "$1" "$2") notes for $2, want $3 (once per GEMM)"; }
done
same() { # run, what[, the reference run: fused]: byte-identical losses and checkpoints
  local ref=${3:-fused}
  [ "$(losses "$t/$ref.jsonl")" = "$(losses "$t/$1.jsonl")" ] || {
    paste <(losses "$t/$ref.jsonl") <(losses "$t/$1.jsonl"); fail "$2: losses differ"; }
  for f in model.safetensors optimizer.safetensors; do
    cmp -s "$t/ck_$ref/step_00000002/$f" "$t/ck_$1/step_00000002/$f" || fail "$2: $f differs"
  done
}
same fwd "forward fallback"
same all "fallback"
same tuned "autotuned"
grep -q "^gemm autotune: [1-9][0-9]* GEMM shapes tuned in .* s (" "$t/tuned.out" || { cat "$t/tuned.out"; fail "no autotune summary"; }
! grep -q "^gemm autotune" "$t/fused.out" || fail "the emulated device tuned by default"
[ "$(losses "$t/bgrad.jsonl" | head -1)" = "$(losses "$t/all.jsonl" | head -1)" ] || {
  paste <(losses "$t/bgrad.jsonl") <(losses "$t/all.jsonl"); fail "DGELU_BGRAD: the step-1 losses differ"; }
paste -d' ' <(losses "$t/bgrad.jsonl") <(losses "$t/all.jsonl") | awk '{ d = $1 - $2; if (d < 0) d = -d;
  if (d > 1e-5 * ($1 < 0 ? -$1 : $1)) { print "FAIL: DGELU_BGRAD: loss " $1 " against the fallback " $2; bad = 1 } } END { exit bad }'
for f in model.safetensors optimizer.safetensors; do
  "$st_close" "$t/ck_bgrad/step_00000002/$f" "$t/ck_all/step_00000002/$f" 3e-4 || fail "DGELU_BGRAD: $f"
done
# a name that is no epilogue is refused, not ignored
if SHARDRT_DEVICE=emu SHARDRT_EMU_NO_EPILOGUE=BIAS,GELU "$t/tb" --data "$t/data.txt" --steps 1 --eval-every 0 >"$t/bad.out" 2>&1 ||
  ! grep -q "SHARDRT_EMU_NO_EPILOGUE=BIAS,GELU: 'GELU' is no epilogue" "$t/bad.out"; then
  cat "$t/bad.out"; fail "SHARDRT_EMU_NO_EPILOGUE=BIAS,GELU was not refused"
fi
grep "^gemm autotune" "$t/tuned.out"
"$shardc" build models/llama3-8b.model -D vocab=256 -D seq=16 -D d=64 -D heads=4 -D kv_heads=2 -D layers=2 -D ffn=96 \
  -D micro_batch=2 -D batch=2 -D tp=1 -D sp=off --world 1 --target cuda -o "$t/llama" >"$t/build_llama.out" 2>&1 || {
  cat "$t/build_llama.out"; exit 1; }
bin=$t/llama run llama ""
bin=$t/llama run llama_unfused RESIDUAL
[ "$(grep -c '^note: .*no algorithm' "$t/llama.out" || true)" = 0 ] || fail "the llama run fell back"
# one note per source line (the GEMM's `where`): swiglu's line 86 holds the forward's w_down and the backward's w_gate dX
[ "$(notes llama_unfused RESIDUAL)" = 4 ] || { grep note "$t/llama_unfused.out" || true; fail "llama: $(notes llama_unfused RESIDUAL) notes for RESIDUAL, want 4 (once per source line)"; }
same llama_unfused "llama: the residual epilogues' fallback" llama
echo "cuda epilogue fallback (emulated device, tiny bf16, 5 epilogue GEMMs): the forward's unfused, all unfused and the autotuned byte-identical to fused (DGELU + the column reduction); DGELU_BGRAD within tolerance; Llama-shaped bf16: its 5 residual GEMMs without a bias byte-identical unfused"
