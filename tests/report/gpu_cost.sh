#!/usr/bin/env bash
# tests/report/gpu_cost.sh — the GPU cost model (passes/cost.c, the topology's defaults) against the
# CUDA trainers measured on one NVIDIA H100 80GB HBM3 (2026-11-27, docs/performance.md "The CUDA target
# on one H100, 2026-11-27" and "The GPU cost model against the H100 (2026-11-27)"), per class of
# kernels, on models/topo/p5.topo (an H100 SXM's figures), CUDA target, bf16, one rank:
#  - GPT-2 124M, B 16 x 1024: ncu's gpu__time_duration of the trainer's third step (tests/gpu/session.sh
#    PARTS=ncu; `python3 tests/gpu/ncu_sum.py --tsv ncu2.csv ncu3.csv`): 29.60 ms in 351 launches:
#    cuBLASLt's GEMMs (nvjet*, sm90_xmma*, cublasLt::splitKreduce) 17.80 ms in 159 launches (147 GEMMs, 12
#    of them split over K with a second, reducing kernel), attention (the tuned flash_fwd_wg,
#    flash_bwd_q_wg, flash_bwd_kv_wg: k16, k44, k60) 5.71 ms in 36, the rest 6.09 ms in 156; the step
#    (bench/gpu_compare.sh, median of 20) 30.6 ms, so 1.0 ms beside the kernels (the graph's launches);
#  - the Llama shape (509M: 8 layers, d 2048, 16 heads / 8 KV, ffn 5632, vocab 32000), B 8 x 1024: the
#    step 47.9 ms; its attention from the tile sweep (PARTS=sweep, B 8 hd 128, the tiles the trainer
#    tunes: forward wg(64,2) 146.0 us, backward 372.6) x 8 layers: 4.15 ms.
# The model's kernel calls equal the launches of the program codegen writes for the plan (its C counted
# by tests/report/cuda_launches.py), for these two and GPT-2 under full recompute and accumulation.
# Each predicted class within its tolerance of the measurement: GEMMs and attention 10 %, the rest
# (bandwidth-bound kernels) 15 %, kernel calls 5 % of 339 (the launches less cuBLASLt's 12 split-K
# reductions, which the model counts in their GEMMs; 25 more since the norms' backward is two launches, 24 fewer
# since the layers' norms' backward adds the residual gradient itself), their overhead 20 % of the 1.0 ms, steps 10 %.
# Usage: tests/report/gpu_cost.sh SHARDC
set -uo pipefail
shardc=${1:?usage: gpu_cost.sh SHARDC}
source "$(dirname "$0")/lib.sh"

# the compute line's parts: GEMM, attention, bandwidth-bound, kernel calls, their overhead (seconds)
part() { # FILE FIELD
  local line
  line=$(grep '^#   compute ' "$1")
  case $2 in
  gemm) sed -n 's/.* GEMM \([0-9.e+]* [mu]*s\),.*/\1/p' <<<"$line" | secs ;;
  attn) sed -n 's/.* attention \([0-9.e+]* [mu]*s\),.*/\1/p' <<<"$line" | secs ;;
  rest) sed -n 's/.* bandwidth-bound \([0-9.e+]* [mu]*s\),.*/\1/p' <<<"$line" | secs ;;
  calls) sed -n 's/.*, \([0-9]*\) kernel calls .*/\1/p' <<<"$line" ;;
  over) sed -n 's/.* kernel calls \([0-9.e+]* [mu]*s\)$/\1/p' <<<"$line" | secs ;;
  step) sed -n 's/^#   step  *\([0-9.e+]* [mu]*s\) .*/\1/p' "$1" | secs ;;
  esac
}

near() { # WHAT PREDICTED MEASURED TOLERANCE
  if [ -z "$2" ]; then
    bad "$1: no prediction found"
    return
  fi
  if awk -v p="$2" -v m="$3" -v t="$4" 'BEGIN { e = (p - m) / m; exit !(e <= t && e >= -t) }'; then
    printf '  %-28s predicted %-10.4g measured %-10.4g (%+.1f %%, within %g %%)\n' "$1" "$2" "$3" \
      "$(awk -v p="$2" -v m="$3" 'BEGIN { print 100 * (p - m) / m }')" "$(awk -v t="$4" 'BEGIN { print 100 * t }')"
  else
    bad "$1: predicted $2, measured $3 (tolerance $(awk -v t="$4" 'BEGIN { print 100 * t }') %)"
  fi
}

"$shardc" plan models/gpt2-124m.model --topology models/topo/p5.topo --world 1 --target cuda \
  -D micro_batch=16 -D batch=16 -D seq=1024 -D zero=0 --cost >"$tmp/gpt2.txt" || bad "gpt2: plan failed"
"$shardc" plan models/llama3-8b.model --topology models/topo/p5.topo --world 1 --target cuda -D vocab=32000 \
  -D layers=8 -D d=2048 -D heads=16 -D kv_heads=8 -D ffn=5632 -D seq=1024 -D micro_batch=8 -D batch=8 -D zero=0 \
  -D recompute=none -D tp=1 -D sp=off --cost >"$tmp/llama.txt" || bad "llama: plan failed"

echo "GPT-2 124M, B 16 x 1024, one H100 (ncu of the step's kernels)"
g=$tmp/gpt2.txt
near "GEMMs (s)" "$(part "$g" gemm)" 17.80e-3 0.10
near "attention (s)" "$(part "$g" attn)" 5.71e-3 0.10
near "the rest (s)" "$(part "$g" rest)" 6.09e-3 0.15
# (339: the program of 304e096, measured; since cd62459 the norms' backward is two launches, the blocks' dw / db
# column sums a second one, 25 more a step: 12 layers x 2 norms and the final norm; since passes/fuse_normres.c
# the add of the residual gradient after each of the layers' 24 norms' backward is in its kernel: 24 fewer)
near "kernel calls" "$(part "$g" calls)" $((339 + 25 - 24)) 0.05
near "beside the kernels (s)" "$(part "$g" over)" 1.0e-3 0.20
near "step (s)" "$(part "$g" step)" 30.6e-3 0.10
echo "Llama 509M, B 8 x 1024, one H100 (the step; attention from the tile sweep)"
l=$tmp/llama.txt
near "attention (s)" "$(part "$l" attn)" 4.15e-3 0.10
near "step (s)" "$(part "$l" step)" 47.9e-3 0.10

# the model's kernel calls are the program's launches: the same plans' C (codegen/target_cuda.c) counted
# on the runtime's default path (tests/report/cuda_launches.py)
"$shardc" plan models/gpt2-124m.model --topology models/topo/p5.topo --world 1 --target cuda \
  -D micro_batch=16 -D batch=16 -D seq=1024 -D zero=0 --emit-c "$tmp/gpt2c" >/dev/null || bad "gpt2: --emit-c failed"
"$shardc" plan models/llama3-8b.model --topology models/topo/p5.topo --world 1 --target cuda -D vocab=32000 \
  -D layers=8 -D d=2048 -D heads=16 -D kv_heads=8 -D ffn=5632 -D seq=1024 -D micro_batch=8 -D batch=8 -D zero=0 \
  -D recompute=none -D tp=1 -D sp=off --emit-c "$tmp/llamac" >/dev/null || bad "llama: --emit-c failed"
# (and GPT-2 under full recompute, its layers' forward again in the backward, and with 2 accumulation
# micro-steps, the accumulation loop)
for v in recompute=full batch=32; do
  "$shardc" plan models/gpt2-124m.model --topology models/topo/p5.topo --world 1 --target cuda -D micro_batch=16 \
    -D batch=16 -D seq=1024 -D zero=0 -D $v --cost >"$tmp/gpt2-$v.txt" || bad "gpt2 $v: plan failed"
  "$shardc" plan models/gpt2-124m.model --topology models/topo/p5.topo --world 1 --target cuda -D micro_batch=16 \
    -D batch=16 -D seq=1024 -D zero=0 -D $v --emit-c "$tmp/gpt2c-$v" >/dev/null || bad "gpt2 $v: --emit-c failed"
done
for x in "gpt2 $g $tmp/gpt2c/gpt2.c" "llama $l $tmp/llamac/llama3_8b.c" \
  "gpt2-recompute $tmp/gpt2-recompute=full.txt $tmp/gpt2c-recompute=full/gpt2.c" \
  "gpt2-accumulation $tmp/gpt2-batch=32.txt $tmp/gpt2c-batch=32/gpt2.c"; do
  set -- $x
  launched=$(python3 tests/report/cuda_launches.py "$3") || bad "$1: cuda_launches.py failed"
  predicted=$(part "$2" calls)
  if [ -n "$launched" ] && [ "$launched" = "$predicted" ]; then
    echo "  $1: kernel calls $predicted, the program launches $launched"
  else
    bad "$1: the model counts $predicted kernel calls, the program launches ${launched:-?}"
  fi
done

# the head dim's effect comes from the backward's per-score work: at hd 128 the attention's rate is
# above hd 64's (the sweep: 232 against 190 TFLOP/s, fwd + bwd), not one flat fraction of the peak
ga=$(part "$g" attn) la=$(part "$l" attn)
# FLOPs counted by the model (causal: half; backward 2.5 x): GPT-2 12 layers of B 16 x 1024^2 x 768,
# Llama 8 layers of B 8 x 1024^2 x 2048
awk -v ga="$ga" -v la="$la" 'BEGIN {
  fg = 12 * 3.5 * 0.5 * 4 * 16 * 1024 * 1024 * 768; fl = 8 * 3.5 * 0.5 * 4 * 8 * 1024 * 1024 * 2048
  rg = fg / ga; rl = fl / la
  printf "  attention rate: hd 64 %.0f TFLOP/s, hd 128 %.0f TFLOP/s\n", rg / 1e12, rl / 1e12
  exit !(rl > 1.1 * rg) }' || bad "attention at hd 128 not faster per FLOP than at hd 64"
exit $fail
