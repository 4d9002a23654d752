#!/usr/bin/env bash
# bench/cost_classes.sh — the CPU cost model's classes (`shardc plan --profile`, the compute line: GEMM,
# attention, bandwidth-bound) against where the trainers' steps go (bench/step_classes.sh, perf), with a
# profile calibrated just before by this build and, BEFORE=DIR, by another build's shardc from this
# profile with its lines matching BEFORE_KEYS (default '^attention_') taken from that build's
# bench_calibrate (run right after this one's): one measurement, two predictions. Three trainers, one
# thread: tiny at seq 512 (micro-batch 4: attention), a Llama-shaped model at seq 1024 (GEMMs, RoPE) and
# tiny at GPT-2's vocabulary (50257: the LM head's GEMMs and the cross-entropy; `--cpu-kernels c`, so that
# perf names the cross-entropy's kernel). docs/performance.md "The CPU cost model's GEMMs and cross-entropy".
#   [BEFORE=DIR [BEFORE_KEYS=REGEX]] bench/cost_classes.sh [BUILD_DIR]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
before=${BEFORE:+$(cd "$BEFORE" && pwd)}
keys=${BEFORE_KEYS:-^attention_}
cd "$(dirname "$0")/.."
root=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# $(date -u '+%F %H:%M') UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/bench_calibrate" "$tmp/after.p" 1
if [ -n "$before" ]; then
  "$before/bench/bench_calibrate" "$tmp/cal.p" 1
  { grep -Ev "$keys" "$tmp/after.p"; grep -E "$keys" "$tmp/cal.p"; } >"$tmp/before.p"
fi
head -c 300000 /dev/urandom | base64 >"$tmp/corpus.txt"
python3 -c "
import struct, random
n = 200000; h = [0] * 256; h[0], h[1], h[2] = 20240520, 1, n; random.seed(1)
open('$tmp/tok.bin', 'wb').write(struct.pack('<256i', *h) + struct.pack('<%dH' % n, *[random.randrange(50257) for _ in range(n)]))"
one() { # name data steps model -D...
  local name=$1 data=$2 steps=$3 model=$4
  shift 4
  "$build/shardc" build "$model" --world 1 "$@" -o "$tmp/$name" >/dev/null 2>&1
  echo "## $name: $model $*"
  echo "predicted (after):  $("$build/shardc" plan "$model" --world 1 "$@" --profile "$tmp/after.p" 2>&1 | grep '^#   compute')"
  [ -n "$before" ] &&
    echo "predicted (before): $("$before/shardc" plan "$model" --world 1 "$@" --profile "$tmp/before.p" 2>&1 | grep '^#   compute')"
  bench/step_classes.sh "$tmp/$name" "$data" "$steps" | grep -v '^#'
}
one tiny512 "$tmp/corpus.txt" 30 models/tiny.model -D seq=512 -D micro_batch=4 -D dp=1
one llama1k "$tmp/corpus.txt" 6 models/llama3-8b.model -D vocab=256 -D seq=1024 -D d=256 -D heads=4 -D kv_heads=2 \
  -D layers=2 -D ffn=512 -D sp=off -D zero=0 -D recompute=none -D precision=f32 -D batch=2 -D micro_batch=2 -D dp=1 -D tp=1
one tinyV "$tmp/tok.bin" 10 models/tiny.model -D vocab=50257 -D micro_batch=4 -D dp=1 --cpu-kernels c
grep -E '^(gemm_|elem_xent)' "$tmp/after.p"
[ -z "$before" ] || grep -E "$keys" "$tmp/before.p"
