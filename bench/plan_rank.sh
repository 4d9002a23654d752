#!/usr/bin/env bash
# bench/plan_rank.sh — does the plan search's fastest plan measure fastest? (issue 18)
# On the 4-rank CPU topology (models/topo/cpu.topo with 4 ranks on the node), calibrate the device
# (bench_calibrate, one thread), run `shardc plan MODEL --search --profile` and take its top K ranked
# (compiled, fitting) plans; build each and time them side by side under mpirun, ROUNDS rounds, the
# plans interleaved within a round (A B C D A B C D ...) so that the machine's load falls on all of
# them alike. Per plan and round: CPU seconds per rank and step (user + system of every rank, a
# 2-step run subtracted, as bench/cost_validate.sh: on a shared machine a step's wall time is mostly
# waiting for a core) and the trainer's own wall ms/step; the median over the rounds, and each
# plan's spread, (max - min) / median of its rounds. Verdict: the predicted fastest is the measured
# fastest, or within the noise of it (the larger spread of the two). Results: docs/performance.md ("Plan search").
#   bench/plan_rank.sh [BUILD_DIR] [STEPS] [K] [ROUNDS] [MODEL] [-D KEY=VALUE ...]
# e.g. bench/plan_rank.sh build 40 4 5 models/tiny.model -D pp=1
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-40}
k=${3:-4}
rounds=${4:-5}
model=${5:-models/tiny.model}
shift $(($# < 5 ? $# : 5))
pins=("$@")
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cp "$build/shardc" "$tmp/shardc" # the compiler as it was at the start (a rebuild meanwhile does not disturb the run)
sed 's/cpu x 2/cpu x 4/; s/topology cpu /topology cpu4 /' models/topo/cpu.topo >"$tmp/cpu4.topo"
"$build/bench/bench_calibrate" "$tmp/cpu.profile" 1 >/dev/null
head -c 300000 /dev/urandom | base64 >"$tmp/corpus.txt"
echo "# $(date -u '+%F %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores; $model, ${pins[*]:-no pins}, $steps steps, $rounds rounds"
search=$("$tmp/shardc" plan "$model" --topology "$tmp/cpu4.topo" --profile "$tmp/cpu.profile" --search --top "$k" \
  --budget 120 "${pins[@]}" 2>&1) || { echo "$search"; exit 1; }
echo "$search" | sed '/^# analytic ranking vs compiled/,$d' | grep -E '^# +(#|[0-9]+  dp)' | cut -c1-120
global=$(echo "$search" | sed -n 's/.*global batch \([0-9]*\) sequences.*/\1/p')
# "dp 2 tp 2+sp pp 2 int2 cp 2 z1 rc sel mb 8" -> -D flags
flags() {
  echo "$1" | awk -v g="$global" '{
    out = "-D batch=" g " -D pp=1 -D cp=1"
    for (i = 1; i <= NF; i++) {
      if ($i == "dp" || $i == "cp") out = out " -D " $i "=" $(i + 1)
      else if ($i == "tp") { t = $(i + 1); sp = t ~ /\+sp$/; sub(/\+sp$/, "", t); out = out " -D tp=" t " -D sp=" (sp ? "on" : "off") }
      else if ($i == "pp") { s = $(i + 2); if (s == "int2") s = "interleaved"; out = out " -D pp=" $(i + 1) " -D schedule=" s }
      else if ($i ~ /^z[0-3]$/) out = out " -D zero=" substr($i, 2)
      else if ($i == "rc") { r = $(i + 1); if (r == "sel") r = "selective"; out = out " -D recompute=" r }
      else if ($i == "mb") out = out " -D micro_batch=" $(i + 1)
    }
    print out }'
}
mapfile -t rows < <(echo "$search" | sed '/^# analytic ranking vs compiled/,$d' | grep -E '^# +[0-9]+  dp' | head -n "$k")
[ "${#rows[@]}" -ge 2 ] || { echo "fewer than 2 ranked plans"; exit 1; }
declare -a label pred
for i in "${!rows[@]}"; do
  r=${rows[$i]}
  label[$i]=$(echo "$r" | sed -E 's/^# +[0-9]+  //; s/ +[0-9.]+ (ms|us|s) .*//')
  pred[$i]=$(echo "$r" | sed -E 's/^# +[0-9]+  //' | grep -oE '[0-9.]+ (ms|us|s)' | head -1)
  # shellcheck disable=SC2046
  "$tmp/shardc" build "$model" --topology "$tmp/cpu4.topo" $(flags "${label[$i]}") -o "$tmp/t$i" >"$tmp/b$i.log" 2>&1 ||
    { echo "build of ${label[$i]} failed: $(tail -2 "$tmp/b$i.log")"; exit 1; }
done
cpu() { # trainer steps -> CPU seconds of every rank; the trainer's ms/step into $tmp/wall
  (cd "$tmp" && /usr/bin/time -f "%U %S" -o "$tmp/cpu" mpirun -np 4 --bind-to none "$1" --data "$tmp/corpus.txt" \
    --threads 1 --steps "$2" --eval-every 0 --val-batches 1 >"$tmp/out" 2>&1)
  sed -n 's/.* \([0-9.]*\) ms\/step.*/\1/p' "$tmp/out" >"$tmp/wall"
  awk '{ print $1 + $2 }' "$tmp/cpu"
}
for ((rd = 0; rd < rounds; rd++)); do
  for i in "${!rows[@]}"; do
    c0=$(cpu "$tmp/t$i" 2)
    c1=$(cpu "$tmp/t$i" $((steps + 2)))
    awk -v a="$c0" -v b="$c1" -v s="$steps" 'BEGIN { printf "%.4f\n", (b - a) / s / 4 * 1e3 }' >>"$tmp/m$i"
    cat "$tmp/wall" >>"$tmp/w$i"
  done
done
med() { sort -g "$1" | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
spread() { sort -g "$1" | awk -v m="$2" '{ v[NR] = $1 } END { print (m > 0 ? (v[NR] - v[1]) / m : 0) }'; }
printf '%-3s %-40s %10s %14s %10s %14s\n' "#" plan predicted "CPU ms/step" spread "wall ms/step"
best=0
declare -a cm sp
for i in "${!rows[@]}"; do
  cm[$i]=$(med "$tmp/m$i")
  s=$(spread "$tmp/m$i" "${cm[$i]}")
  sp[$i]=$s
  awk -v a="${cm[$i]}" -v b="${cm[$best]}" 'BEGIN { exit !(a < b) }' && best=$i
  printf '%-3s %-40s %10s %11.2f ms %9.0f%% %11.2f ms\n' $((i + 1)) "${label[$i]}" "${pred[$i]}" "${cm[$i]}" \
    "$(awk -v s="$s" 'BEGIN { print 100 * s }')" "$(med "$tmp/w$i")"
done
gap=$(awk -v a="${cm[0]}" -v b="${cm[$best]}" 'BEGIN { print a / b - 1 }')
noise=$(awk -v a="${sp[0]}" -v b="${sp[$best]}" 'BEGIN { print (a > b ? a : b) }') # the two plans' own spreads
if [ "$best" -eq 0 ]; then
  echo "verdict: the predicted fastest (#1) measures fastest"
elif awk -v g="$gap" -v n="$noise" 'BEGIN { exit !(g <= n) }'; then
  printf 'verdict: #%d measures fastest; the predicted fastest (#1) is %.0f%% slower, within the noise (%.0f%%)\n' \
    $((best + 1)) "$(awk -v g="$gap" 'BEGIN { print 100 * g }')" "$(awk -v n="$noise" 'BEGIN { print 100 * n }')"
else
  printf 'verdict: #%d measures fastest; the predicted fastest (#1) is %.0f%% slower, beyond the noise (%.0f%%)\n' \
    $((best + 1)) "$(awk -v g="$gap" 'BEGIN { print 100 * g }')" "$(awk -v n="$noise" 'BEGIN { print 100 * n }')"
fi
