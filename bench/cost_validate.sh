#!/usr/bin/env bash
# bench/cost_validate.sh — the cost model against measurement on this machine: calibrate
# (bench_calibrate, one thread), then for a few plans of tiny on 1, 2 and 4 ranks the predicted step
# (`shardc plan --cost --profile`) next to the trainer's measured one, one compute thread per rank.
# Measured: CPU seconds per rank and step (user + system of every rank, a run of STEPS + 2 steps
# minus one of 2), not wall-clock: this machine is shared by many jobs (load 10-20 on 2 cores), so
# a step's wall time is mostly waiting for a core; a rank waiting in a collective spins, so its
# CPU time is the step's on an idle machine. Results: docs/performance.md ("Cost model").
# BEFORE=DIR: another build's shardc (e.g. the commit before a cost-model change) predicts too,
# printed beside (one measurement, two predictions), from this profile with its lines matching
# BEFORE_KEYS (an extended regex, default '^attention_') replaced by those of that build's
# bench_calibrate, run right after this one's (so that only the changed terms' model and calibration
# differ, not the rest's run-to-run noise); keys that build does not know must match BEFORE_KEYS.
# The attention-heavy plans run STEPS / 4 (tiny at seq 512, and tiny at GPT-2's vocabulary: its
# cross-entropy) and STEPS / 8 (Llama-shaped) steps.
#   [BEFORE=DIR [BEFORE_KEYS=REGEX]] bench/cost_validate.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-30}
before=${BEFORE:+$(cd "$BEFORE" && pwd)}
keys=${BEFORE_KEYS:-^attention_}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
echo "# $(date -u '+%F %H:%M') UTC, load $(cut -d' ' -f1-3 /proc/loadavg), $steps steps"
"$build/bench/bench_calibrate" "$tmp/cpu.profile" 1
cat "$tmp/cpu.profile"
if [ -n "$before" ]; then
  "$before/bench/bench_calibrate" "$tmp/before.cal" 1
  { grep -Ev "$keys" "$tmp/cpu.profile"; grep -E "$keys" "$tmp/before.cal"; } >"$tmp/before.profile"
  grep -E "$keys" "$tmp/before.profile"
fi
head -c 200000 /dev/urandom | base64 >"$tmp/corpus.txt"
python3 -c "
import struct, random
n = 200000; h = [0] * 256; h[0], h[1], h[2] = 20240520, 1, n; random.seed(1)
open('$tmp/tok.bin', 'wb').write(struct.pack('<256i', *h) + struct.pack('<%dH' % n, *[random.randrange(50257) for _ in range(n)]))"
secs() { awk '{ v = $1; u = $2; print v * (u == "ms" ? 1e-3 : u == "us" ? 1e-6 : 1) }'; }
if [ -n "$before" ]; then
  printf '%-44s %12s %8s %12s %12s %8s\n' plan before error predicted measured error
else
  printf '%-44s %12s %12s %8s\n' plan predicted measured error
fi
predict() { # shardc profile model world -D...
  local sh=$1 prof=$2 model=$3 world=$4
  shift 4
  "$sh" plan "$model" --world "$world" "$@" --profile "$prof" 2>/dev/null |
    sed -n 's/^#   step  *\([0-9.e+]* [mu]*s\) .*/\1/p' | secs
}
run() { # model world -D...
  local model=$1 world=$2
  shift 2
  local pred pb=""
  pred=$(predict "$build/shardc" "$tmp/cpu.profile" "$model" "$world" "$@")
  [ -n "$before" ] && pb=$(predict "$before/shardc" "$tmp/before.profile" "$model" "$world" "$@")
  "$build/shardc" build "$model" --world "$world" "$@" -o "$tmp/t" >/dev/null 2>&1
  local launch=""
  [ "$world" -gt 1 ] && launch="mpirun -np $world --bind-to none"
  # CPU seconds of every rank (user + system, through mpirun), a 2-step run subtracted: the
  # start-up, the final evaluation and checkpoint cancel; per rank and step
  cpu() {
    (cd "$tmp" && /usr/bin/time -f "%U %S" -o "$tmp/cpu" $launch "$tmp/t" --data "${DATA:-$tmp/corpus.txt}" --threads 1 \
      --steps "$1" >/dev/null 2>&1)
    awk '{ print $1 + $2 }' "$tmp/cpu"
  }
  local c0 c1 meas
  c0=$(cpu 2)
  local n=${RUN_STEPS:-$steps} # (RUN_STEPS=N run ...: a plan's own count, for a slow one; DATA=FILE: its data)
  c1=$(cpu $((n + 2)))
  meas=$(awk -v a="$c0" -v b="$c1" -v s="$n" -v w="$world" 'BEGIN { print (b - a) / s / w }')
  awk -v b="$pb" -v p="$pred" -v m="$meas" -v n="$(basename "$model" .model) x$world $*" \
    'BEGIN { if (b != "") printf "%-44s %9.2f ms %+7.1f%% ", n, b * 1e3, 100 * (b - m) / m; else printf "%-44s ", n
      printf "%9.2f ms %9.2f ms %+7.1f%%\n", p * 1e3, m * 1e3, 100 * (p - m) / m }'
}
run models/tiny.model 1
run models/tiny.model 1 -D micro_batch=4
run models/tiny.model 2
run models/tiny.model 2 -D tp=2 -D dp=1
run models/tiny.model 2 -D tp=2 -D dp=1 -D sp=on
run models/tiny.model 4
run models/tiny.model 4 -D tp=2 -D dp=2
# attention a large share: tiny at seq 512 (hd 16), a Llama-shaped model at seq 1024 (hd 64, grouped kv)
RUN_STEPS=$(((steps + 3) / 4)) run models/tiny.model 1 -D seq=512 -D micro_batch=4
RUN_STEPS=$(((steps + 7) / 8)) run models/llama3-8b.model 1 -D vocab=256 -D seq=1024 -D d=256 -D heads=4 -D kv_heads=2 -D layers=2 -D ffn=512 \
  -D sp=off -D zero=0 -D recompute=none -D precision=f32 -D batch=2 -D micro_batch=2 -D dp=1 -D tp=1
# the cross-entropy a large share: tiny at GPT-2's vocabulary (50257 logits a token)
# (its tokens: an llm.c shard of random GPT-2 ids)
DATA=$tmp/tok.bin RUN_STEPS=$(((steps + 3) / 4)) run models/tiny.model 1 -D vocab=50257 -D micro_batch=4
