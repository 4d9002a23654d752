#!/usr/bin/env bash
# tests/gpu/run_gpu.sh — on a machine with an NVIDIA GPU, from binaries built elsewhere
# (tests/gpu/pack.sh packs them into .gpu/: the GPU machine has no flex, bison, MPI or BLAS to build
# shardc). Runs:
#   1. the runtime on the device: launches, shared memory, copies, cuBLASLt GEMMs (f32 exact, bf16
#      with fp32 accumulation, ta/tb, batched, shared B, odd element-aligned pointers) and their
#      epilogues (bias, bias + GELU, bias + residual, the residual without a bias, GELU's backward with the bias gradient:
#      passes/epilogue.c) against naive references (test_cudart gpu), and a device program trained through rt_train_main against the
#      CPU one within 1e-5 (test_cudart train with SHARDRT_DEVICE=cuda)
#   2. every kernel family against its CPU reference on the device, then the kernel timings
#      (cuda_kernels_gpu: the cases of tests/cuda/kcases.c; the fused cross-entropy beside the
#      separate forward and backward)
#   3. the tiny model: the CUDA binary's first losses against the CPU binary's (within 2%: bf16)
#   4. GPT-2 124M, B=16, T=1024: the loss falls; ms/step, tokens/s and MFU (median after step 1)
# The emulated-device and NVRTC tests (ctest -L cuda) run in CI on every machine.
# Usage (GPU machine, from the tree): source .gpu/env.sh && tests/gpu/run_gpu.sh [bin=.gpu/bin] [gpt2-steps=30]
# Prints each part's result and the failure count; exit 1 when anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$(cd "${1:-.gpu/bin}" && pwd) || exit 1
steps=${2:-30}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
export SHARDRT_CUBIN_CACHE=${SHARDRT_CUBIN_CACHE:-/tmp/shardc-cubin}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fails=0
run() {
  echo "== $*"
  if "$@"; then echo "-- ok"; else echo "-- FAILED (exit $?)"; fails=$((fails + 1)); fi
}

run "$bin/test_cudart" gpu
run env SHARDRT_DEVICE=cuda "$bin/test_cudart" train
run "$bin/cuda_kernels_gpu"

# The first 5 losses of tiny (byte-level) on both targets: bf16 compute moves them by well under 2%.
tiny_losses() { grep -o '"loss":[0-9.e+-]*' "$1" | head -5 | cut -d: -f2 | tr '\n' ' '; }
tiny() {
  head -c 200000 README.md docs/*.md > "$t/bytes.txt" 2>/dev/null
  "$bin/tiny_cpu" --data "$t/bytes.txt" --steps 5 --log "$t/cpu.jsonl" >/dev/null || return 1
  "$bin/tiny_cuda" --data "$t/bytes.txt" --steps 5 --log "$t/cuda.jsonl" || return 1
  local a b
  a=$(tiny_losses "$t/cpu.jsonl")
  b=$(tiny_losses "$t/cuda.jsonl")
  echo "cpu:  $a"
  echo "cuda: $b"
  awk -v a="$a" -v b="$b" 'BEGIN { n = split(a, x, " "); split(b, y, " "); if (n < 5) exit 1;
    for (i = 1; i <= n; i++) { d = (x[i] - y[i]) / x[i]; if (d < 0) d = -d; if (d > 0.02) { print "step " i ": " d; exit 1 } } }'
}
run tiny

# GPT-2 124M on one GPU: a repeated random token sequence (the loss must fall well below ln(50257) = 10.8).
gpt2() {
  python3 bench/gpt2_tokens.py "$t/tok.bin" 800000 --vocab 50257 --repeat 4096 || return 1
  "$bin/gpt2_cuda" --data "$t/tok.bin" --steps "$steps" --eval-every 0 --val-batches 1 --log "$t/gpt2.jsonl" |
    grep -E "^(model|device|steps|step +[0-9]+/|done|memory)" || return 1
  python3 - "$t/gpt2.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
steady = rows[1:] if len(rows) > 1 else rows
print("gpt2-124m B=16 T=1024: loss %.3f -> %.3f; median %.1f ms/step, %.0f tokens/s, MFU %.1f%%" % (
    rows[0]["loss"], rows[-1]["loss"], statistics.median(r["ms"] for r in steady),
    statistics.median(r["tokens_per_s"] for r in steady), 100 * statistics.median(r["mfu"] for r in steady)))
sys.exit(0 if rows[-1]["loss"] < rows[0]["loss"] - 1.0 else 1)
PY
}
run gpt2

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
