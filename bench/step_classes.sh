#!/usr/bin/env bash
# bench/step_classes.sh — where a CPU trainer's step goes, by the cost model's classes: perf's
# cpu-clock samples at a fixed 0.25 ms period of a 2-step run and of an N+2-step one, one thread,
# the difference per step (start-up, the final evaluation and checkpoint cancel), summed by symbol:
# attention (the attention kernels: attn_fwd / attn_bwd, their micro-kernels mk_*, rt_attn_*),
# GEMM (OpenBLAS), cross-entropy (the C kernels rt_xent_* / rt_ce_*: a `--cpu-kernels c` trainer's; the
# LLVM row kernel of the default trainers is a shardc_llkN among other), start-up (rt_measure_peak_flops'
# fma loop), other (the rest). To set against
# `shardc plan --cost --profile` (docs/performance.md "The CPU cost model's attention").
#   bench/step_classes.sh TRAINER DATA N [trainer flags]
set -euo pipefail
t=$1 data=$2 n=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
classes() {
  perf report -i "$1" --no-children --sort dso,sym --stdio -F period,dso,sym 2>/dev/null | grep -v '^#' | awk '
    NF >= 3 { s = $NF; d = $2
      c = s ~ /^mk_|^attn_(fwd|bwd)|^rt_attn/ ? "attention" : d ~ /openblas/ ? "GEMM" : s == "fma_avx2" ? "start-up" : "other"
      if (s ~ /^rt_xent|^rt_ce_/) c = "cross-entropy"
      sum[c] += $1 }
    END { for (c in sum) print c, sum[c] }'
}
for k in 2 $((n + 2)); do
  perf record -q -e cpu-clock -c 250000 -o "$tmp/$k.data" "$t" --data "$data" --threads 1 --steps "$k" \
    --eval-every 0 --val-batches 1 --save-to '' "$@" >/dev/null 2>&1
  classes "$tmp/$k.data" >"$tmp/$k.txt"
done
echo "# $(date -u '+%F %H:%M') UTC, load $(cut -d' ' -f1-3 /proc/loadavg); $t, $n steps"
awk -v n="$n" 'NR == FNR { a[$1] = $2; next }
  { ms = ($2 - a[$1]) / n * 1e-6; tot += ms; printf "%-10s %9.2f ms/step\n", $1, ms }
  END { printf "%-10s %9.2f ms/step\n", "total", tot }' "$tmp/2.txt" "$tmp/$((n + 2)).txt"
