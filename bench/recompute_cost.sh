#!/usr/bin/env bash
# bench/recompute_cost.sh — the cost model's price of activation recompute against measurement:
# `recompute none | selective | full`, the C and the LLVM CPU kernels (--cpu-kernels c|llvm), tiny on
# 1 rank (batch 8, micro-batch 4: accumulation 2) and on 2 ranks (dp 2, batch 16, micro-batch 4: the
# search's `dp 2 rc full mb 4`), one run. Calibrates first (bench_calibrate, one thread, its profile
# read by every prediction), then per plan the predicted step (`shardc plan --cost --profile
# --cpu-kernels K`) and the measured one as bench/cost_validate.sh measures it: CPU seconds per rank
# and step (user + system of every rank, a run of STEPS + 2 steps minus one of 2; the machine is
# shared: wall time is mostly waiting for a core), ROUNDS rounds with every plan run in each (so
# that the machine's noise falls on all alike), the median. Then the recompute deltas (each mode
# over `none` of the same kernels and layout), predicted and measured, and their difference as a
# share of the measured step without recompute. Results: docs/performance.md.
#   bench/recompute_cost.sh [BUILD_DIR] [STEPS] [ROUNDS]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-30}
rounds=${3:-3}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
echo "# $(date -u '+%F %H:%M') UTC, load $(cut -d' ' -f1-3 /proc/loadavg), $steps steps, $rounds rounds"
"$build/bench/bench_calibrate" "$tmp/cpu.profile" 1 >/dev/null
grep -E '^(elem_|llvm_|bandwidth|kernel_overhead|gemm_flops)' "$tmp/cpu.profile"
bash scripts/gen_corpus.sh "$tmp/data.txt" 400000 3 >/dev/null
secs() { awk '{ v = $1; u = $2; print v * (u == "ms" ? 1e-3 : u == "us" ? 1e-6 : 1) }'; }
layouts=("1:-D batch=8 -D micro_batch=4" "2:-D batch=16 -D micro_batch=4")
plans=()
for lay in "${layouts[@]}"; do
  for k in c llvm; do
    for rc in none selective full; do plans+=("${lay%%:*}|$k|$rc|${lay#*:}"); done
  done
done
# predictions and binaries
for i in "${!plans[@]}"; do
  IFS='|' read -r w k rc defs <<<"${plans[$i]}"
  # shellcheck disable=SC2086
  "$build/shardc" plan models/tiny.model --world "$w" $defs -D recompute=$rc --cpu-kernels "$k" --profile "$tmp/cpu.profile" \
    2>/dev/null | sed -n 's/^#   step  *\([0-9.e+]* [mu]*s\) .*/\1/p' | secs >"$tmp/pred.$i"
  # shellcheck disable=SC2086
  "$build/shardc" build models/tiny.model --world "$w" $defs -D recompute=$rc --cpu-kernels "$k" -o "$tmp/t.$i" >/dev/null 2>&1
done
cpu() { # binary world steps: CPU seconds of every rank
  local launch=""
  [ "$2" -gt 1 ] && launch="mpirun -np $2 --bind-to none"
  (cd "$tmp" && nice -n 10 /usr/bin/time -f "%U %S" -o "$tmp/cpu" $launch "$1" --data "$tmp/data.txt" --threads 1 \
    --steps "$3" --eval-every 0 --val-batches 1 >/dev/null 2>&1)
  awk '{ print $1 + $2 }' "$tmp/cpu"
}
for r in $(seq 1 "$rounds"); do
  for i in "${!plans[@]}"; do
    IFS='|' read -r w k rc defs <<<"${plans[$i]}"
    c0=$(cpu "$tmp/t.$i" "$w" 2)
    c1=$(cpu "$tmp/t.$i" "$w" $((steps + 2)))
    awk -v a="$c0" -v b="$c1" -v s="$steps" -v w="$w" 'BEGIN { print (b - a) / s / w }' >>"$tmp/meas.$i"
  done
  echo "# round $r done, load $(cut -d' ' -f1-3 /proc/loadavg)"
done
median() { sort -g | awk '{ a[n++] = $1 } END { print n % 2 ? a[(n - 1) / 2] : (a[n / 2 - 1] + a[n / 2]) / 2 }'; }
printf '%-5s %-5s %-10s %10s %10s %8s %14s %14s %10s   %s\n' ranks cpu_k recompute predicted measured error \
  "pred. delta" "meas. delta" "delta err" "rounds (ms)"
for i in "${!plans[@]}"; do
  IFS='|' read -r w k rc defs <<<"${plans[$i]}"
  base=$((i - i % 3)) # the same layout's and kernels' `none`
  p=$(cat "$tmp/pred.$i")
  m=$(median <"$tmp/meas.$i")
  p0=$(cat "$tmp/pred.$base")
  m0=$(median <"$tmp/meas.$base")
  all=$(awk '{ printf "%s%.2f", (NR > 1 ? " " : ""), $1 * 1e3 }' "$tmp/meas.$i")
  awk -v w="$w" -v k="$k" -v rc="$rc" -v p="$p" -v m="$m" -v p0="$p0" -v m0="$m0" -v all="$all" 'BEGIN {
    printf "%-5s %-5s %-10s %7.2f ms %7.2f ms %+7.1f%%", w, k, rc, p * 1e3, m * 1e3, 100 * (p - m) / m
    if (rc == "none") printf " %14s %14s %10s", "", "", ""
    else printf " %+7.2f ms %+3.0f%% %+7.2f ms %+3.0f%% %+9.1f%%", (p - p0) * 1e3, 100 * (p - p0) / p0, (m - m0) * 1e3,
      100 * (m - m0) / m0, 100 * ((p - p0) - (m - m0)) / m0
    printf "   %s\n", all }'
done
