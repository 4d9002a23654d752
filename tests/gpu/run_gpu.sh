#!/usr/bin/env bash
# tests/gpu/run_gpu.sh — the GPU half of issue #6, run by hand on a machine with an NVIDIA GPU
# (CI has none; everything here also builds there). Builds shardc with the CUDA target, then:
#   1. the runtime on the real device: launches, shared memory, copies, cuBLASLt GEMMs (f32 exact,
#      bf16 with fp32 accumulation, ta/tb, batched, shared B) against naive references
#      (test_cudart gpu), and a device program trained through rt_train_main equal to the CPU one
#      (test_cudart train with SHARDRT_DEVICE=cuda)
#   2. the CTest label cuda (NVRTC builds, emulated device; the no-GPU test skips itself)
#   3. every kernel against its CPU reference: tests/gpu/kernels_gpu.sh (the kernels' own script), when present
#   4. the tiny model: the CUDA binary's first losses against the CPU binary's
#   5. GPT-2 124M, B=16, T=1024: 50 steps, the loss falls; tokens/s and MFU (median after step 1)
#   6. bench/cuda_peak_bench: the dense bf16 peak (cuBLASLt 8192^3) and copy bandwidth
# Usage: tests/gpu/run_gpu.sh [build-dir=build-gpu] [gpt2-steps=50]
# Prints each part's result and the failure count; exit 1 when anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
steps=${2:-50}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
cmake -S . -B "$build" -G Ninja -DSHARDC_WITH_CUDA=ON >/dev/null || exit 1
ninja -C "$build" || exit 1
export SHARDRT_CUBIN_CACHE="$PWD/$build/kernel-cache"
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fails=0
run() {
  echo "== $*"
  if "$@"; then echo "-- ok"; else echo "-- FAILED (exit $?)"; fails=$((fails + 1)); fi
}

run "$build/tests/cudart/test_cudart" gpu
run env SHARDRT_DEVICE=cuda "$build/tests/cudart/test_cudart" train
run ctest --test-dir "$build" -L cuda --output-on-failure
if [ -x tests/gpu/kernels_gpu.sh ]; then run tests/gpu/kernels_gpu.sh "$build"; fi

# The first 5 losses of tiny (byte-level) on both targets: bf16 compute moves them by well under 2%.
tiny_losses() { grep -o '"loss":[0-9.e+-]*' "$1" | head -5 | cut -d: -f2 | tr '\n' ' '; }
tiny() {
  head -c 200000 README.md docs/*.md > "$t/bytes.txt" 2>/dev/null
  "$build/shardc" build models/tiny.model --world 1 -o "$t/tiny_cpu" &&
    "$build/shardc" build models/tiny.model --world 1 --target cuda -o "$t/tiny_cuda" || return 1
  "$t/tiny_cpu" --data "$t/bytes.txt" --steps 5 --log "$t/cpu.jsonl" >/dev/null || return 1
  "$t/tiny_cuda" --data "$t/bytes.txt" --steps 5 --log "$t/cuda.jsonl" || return 1
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
  "$build/shardc" build models/gpt2-124m.model --world 1 --target cuda -D micro_batch=16 -D batch=16 -D seq=1024 \
    -D zero=0 -o "$t/gpt2_cuda" || return 1
  python3 - "$t/tok.bin" <<'PY' || return 1
import random, struct, sys
random.seed(1)
base = [random.randrange(50257) for _ in range(4096)]
toks = (base * 200)[:800000]
hdr = [0] * 256
hdr[0], hdr[1], hdr[2] = 20240520, 1, len(toks)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *hdr))
    f.write(struct.pack("<%dH" % len(toks), *toks))
PY
  "$t/gpt2_cuda" --data "$t/tok.bin" --steps "$steps" --eval-every 0 --val-batches 1 --log "$t/gpt2.jsonl" |
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

run "$build/bench/cuda_peak_bench" 4096 8192
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
