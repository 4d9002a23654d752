#!/usr/bin/env bash
# Compile time of a pipeline-parallel plan: `shardc plan` of Llama-3-8B at tp 8 x pp 4 (1f1b,
# selective recompute, ZeRO-1, as models/llama3-8b.model with pp 4) for 64 to 512 micro-batches
# per step. The schedule is unrolled into the program (passes/pipe.c), so the program grows with
# pp x M; what must not is the time per instruction. Best of ROUNDS wall times per size, the
# sizes interleaved; with BASE (another shardc, e.g. main's) its times beside, up to BASE_MAX
# micro-batches (an unrolled schedule took minutes at 512 before the quadratic parts went).
#   bench/pp_compile.sh [SHARDC] [ROUNDS] [BASE] [BASE_MAX]
set -euo pipefail
cd "$(dirname "$0")/.."
shardc=${1:-build/shardc}
rounds=${2:-3}
base=${3:-}
base_max=${4:-128}
sizes=(64 128 256 512)
m=(models/llama3-8b.model -D pp=4 --world 32)
wall() { # prints seconds and peak resident MiB of one `shardc plan` (its IR printed only with --ir
  # since 2026-11-26: a BASE from before prints the unrolled program too)
  local t0 t1 kb f
  f=$(mktemp)
  t0=$(date +%s.%N)
  /usr/bin/time -o "$f" -f '%M' "$1" plan "${m[@]}" -D batch="$2" >/dev/null 2>&1
  t1=$(date +%s.%N)
  kb=$(tail -1 "$f")
  rm -f "$f"
  awk -v a="$t0" -v b="$t1" -v k="$kb" 'BEGIN { printf "%.2f %.0f\n", b - a, k / 1024 }'
}
declare -A best mem bbest
echo "nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg), best of $rounds"
for r in $(seq 1 "$rounds"); do
  for M in "${sizes[@]}"; do
    read -r s k < <(wall "$shardc" "$M")
    if [[ -z ${best[$M]:-} ]] || awk -v a="$s" -v b="${best[$M]}" 'BEGIN { exit !(a < b) }'; then best[$M]=$s; fi
    mem[$M]=$k
    if [[ -n $base && $M -le $base_max ]]; then
      read -r s k < <(wall "$base" "$M")
      if [[ -z ${bbest[$M]:-} ]] || awk -v a="$s" -v b="${bbest[$M]}" 'BEGIN { exit !(a < b) }'; then bbest[$M]=$s; fi
    fi
  done
done
printf '%-14s %10s %10s %12s\n' micro-batches "plan s" "peak MiB" "base plan s"
for M in "${sizes[@]}"; do printf '%-14s %10s %10s %12s\n' "$M" "${best[$M]}" "${mem[$M]}" "${bbest[$M]:--}"; done
