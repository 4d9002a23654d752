#!/usr/bin/env bash
# bench/cost_validate.sh — the cost model against measurement on this machine: calibrate
# (bench_calibrate), then for a few plans of tiny and a small Llama on 1-2 ranks, the predicted
# step (`shardc plan --cost --profile`) next to the trainer's measured one (the median of the
# JSONL log's `ms` over steps 6..STEPS). Results: docs/performance.md ("Cost model").
#   bench/cost_validate.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-40}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$build/bench/bench_calibrate" "$tmp/cpu.profile" 1
cat "$tmp/cpu.profile"
head -c 200000 /dev/urandom | base64 >"$tmp/corpus.txt"
secs() { awk '{ v = $1; u = $2; print v * (u == "ms" ? 1e-3 : u == "us" ? 1e-6 : 1) }'; }
printf '%-44s %12s %12s %8s\n' plan predicted measured error
run() { # model world -D...
  local model=$1 world=$2
  shift 2
  local pred
  pred=$("$build/shardc" plan "$model" --world "$world" "$@" --profile "$tmp/cpu.profile" 2>/dev/null |
    sed -n 's/^#   step  *\([0-9.e+]* [mu]*s\) .*/\1/p' | secs)
  "$build/shardc" build "$model" --world "$world" "$@" -o "$tmp/t" >/dev/null 2>&1
  local launch=""
  [ "$world" -gt 1 ] && launch="mpirun -np $world --bind-to none"
  $launch "$tmp/t" --data "$tmp/corpus.txt" --steps "$steps" --log "$tmp/log.jsonl" >/dev/null 2>&1
  local meas
  meas=$(sed -n 's/.*"step":\([0-9]*\),.*"ms":\([0-9.]*\).*/\1 \2/p' "$tmp/log.jsonl" | awk '$1 > 5 { print $2 / 1e3 }' |
    sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  printf '%-44s %9.2f ms %9.2f ms %+7.1f%%\n' "$(basename "$model" .model) x$world $*" "$(echo "$pred * 1e3" | bc -l)" \
    "$(echo "$meas * 1e3" | bc -l)" "$(echo "100 * ($pred - $meas) / $meas" | bc -l)"
}
run models/tiny.model 1
run models/tiny.model 1 -D micro_batch=4
run models/tiny.model 1 -D recompute=full
run models/tiny.model 2
run models/tiny.model 2 -D tp=2 -D dp=1
run models/tiny.model 2 -D zero=1
run models/tiny.model 2 -D tp=2 -D dp=1 -D sp=on
