#!/usr/bin/env bash
# The pipeline bubble measured on CPU ranks (the trainer's --trace, bench/pp_bubble.py) next to the
# plan's prediction (`shardc plan --profile`: the schedule played with each instruction's time from
# the cost model, calibrated on this machine first by bench_calibrate as bench/plan_rank.sh does, and
# each transfer's from its bytes over the link, measured by bench/p2p_link.c: docs/pipeline.md "The
# predicted timeline") and to the
# same schedule replayed with the run's own measured instruction times, transfers free
# (pp_bubble.py's replay), and replayed with each kind of instruction's median time (steady: what
# the spread of the times adds is replayed - steady, what the cost model misses steady - predicted):
# GPipe, 1F1B, interleaved (2 chunks) and zb, at pp 2 and pp 4, for the tiny GPT and a Llama-shaped
# model (8 layers, untied, RoPE, GQA), 8 micro-batches of one sequence,
# 1 thread per rank, STEPS steps (the first skipped), the configurations interleaved over ROUNDS
# rounds; printed: the median over the rounds of each run's median over its steps (measured and
# replayed, steady), the ratios measured / predicted, steady / predicted and measured / replayed, the
# instructions' spread (pp_bubble.py: the RMS coefficient of variation of each kind's times) and the
# range of the single measured steps. PP (default "2 4") picks the pipeline degrees; DETAIL=1 adds, per configuration, the
# plan's predicted per-stage instruction and transfer times and the last round's measured ones. At pp 4 a machine with fewer than 4
# free cores is oversubscribed: ranks wait for a core, which no prediction counts.
# For a machine that cannot build (bench/pp_bubble_pack.sh packs what this needs, with OpenMPI, and
# bench/pp_bubble_packed.sh runs it there): BIN=DIR takes bench_calibrate, p2p_link and the trainers
# (DIR/MODEL-PP-SCHEDULE) from DIR instead of building the trainers; BUILD_TO=DIR only builds the
# trainers into DIR and stops (SHARDC_FLAGS: more `shardc build` options), PLAN_TO=DIR the plans (with
# --profile PROFILE when set, PLAN_FLAGS for --cpu-kernels c); BUDGET=S starts no run
# after S seconds (the table then has the rows measured so far); KEEP=DIR copies the profile, the
# plans, the measurements and the traces there. Each run's result is printed to stderr
# as it ends.
#   bench/pp_bubble.sh [SHARDC] [STEPS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
shardc=${1:-build/shardc}
steps=${2:-6}
rounds=${3:-1}
pps=${PP:-2 4}
t=$(mktemp -d)
keep() { # KEEP=DIR: what the run measured, for a look elsewhere (not the data or the checkpoints)
  mkdir -p "$KEEP" && find "$t" -maxdepth 1 -type f ! -name data.txt ! -perm -u+x -exec cp {} "$KEEP"/ \;
}
trap '[ -z "${KEEP:-}" ] || keep; rm -rf "$t"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
[ -n "${BUILD_TO:-}" ] || bash scripts/gen_corpus.sh "$t/data.txt" 400000 3 >/dev/null
# both models on the CPU topology with a device per rank (models/topo/cpu.topo has 2; pp 4 needs 4 on
# the node, else the plan takes stages 2 and 3 for another node's and their transfers for the network's)
sed 's/cpu x 2/cpu x 4/; s/topology cpu /topology cpu4 /' models/topo/cpu.topo >"$t/cpu4.topo"
tiny=(models/tiny.model --topology "$t/cpu4.topo" -D d=128 -D seq=128 -D layers=8 -D batch=8 -D micro_batch=1 -D dp=1)
llama=(models/llama3-8b.model --topology "$t/cpu4.topo" -D vocab=256 -D seq=128 -D d=128 -D heads=4 -D kv_heads=2 -D layers=8 -D ffn=256
  -D batch=8 -D micro_batch=1 -D dp=1 -D tp=1 -D sp=off -D zero=0 -D recompute=none -D precision=f32)
run=(--data "$t/data.txt" --steps "$steps" --eval-every 0 --val-batches 1 --threads 1 --save-to "$t/ck")
configs=()
for pp in $pps; do # pp-major: with BUDGET, the first degree's rows of both models come first
  for model in tiny llama; do
    for s in gpipe 1f1b interleaved zb; do configs+=("$model:$pp:$s"); done
  done
done
# A configuration's plan (the prediction) into FILE; PLAN_FLAGS: `shardc plan` options, --cpu-kernels c
# unless set (the plan is the same with either kernels: bench/pp_bubble_pack.sh checks it; so it needs
# no LLVM, as the pack's shardc has none)
plan() { # MODEL PP SCHEDULE PROFILE FILE
  declare -n a=$1
  # shellcheck disable=SC2086 # PLAN_FLAGS: several options
  "$shardc" plan "${a[@]}" -D pp="$2" -D schedule="$3" --world "$2" ${4:+--profile "$4"} ${PLAN_FLAGS---cpu-kernels c} \
    >"$5" 2>"$t/plan.err" || { cat "$t/plan.err" >&2; exit 1; }
}
if [ -n "${BUILD_TO:-}${PLAN_TO:-}" ]; then # the trainers only (for BIN=DIR elsewhere), or the plans only (PROFILE)
  mkdir -p "${BUILD_TO:-$PLAN_TO}"
  for c in "${configs[@]}"; do
    IFS=: read -r model pp s <<<"$c"
    declare -n m=$model
    # shellcheck disable=SC2086 # SHARDC_FLAGS: several options
    if [ -n "${BUILD_TO:-}" ]; then "$shardc" build "${m[@]}" -D pp="$pp" -D schedule="$s" --world "$pp" ${SHARDC_FLAGS:-} \
      -o "$BUILD_TO/$model-$pp-$s" 2>/dev/null
    else plan "$model" "$pp" "$s" "${PROFILE:-}" "$PLAN_TO/$model-$pp-$s.plan"; fi
  done
  exit 0
fi
bin=${BIN:-$(dirname "$shardc")/bench}
"$bin/bench_calibrate" "$t/cpu.profile" 1 >"$t/calibrate.log" # the device's figures, one thread (the trainers' --threads 1)
# and the in-node link the transfers cross: shardrt's point-to-point messages, 2 ranks (node_latency, node_bandwidth)
mpirun --mca pml ob1 -np 2 "$bin/p2p_link" "$t/cpu.profile" >"$t/link.log"
echo "nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg), $steps steps (first skipped), $rounds round(s); $(date -u '+%F %H:%M UTC')"
echo "calibrated: $(sed 's/ -> .*//' "$t/calibrate.log"); $(cat "$t/link.log")"
for c in "${configs[@]}"; do
  IFS=: read -r model pp s <<<"$c"
  declare -n m=$model
  if [ -n "${BIN:-}" ]; then ln -s "$(cd "$BIN" && pwd)/$model-$pp-$s" "$t/$model-$pp-$s"
  else "$shardc" build "${m[@]}" -D pp="$pp" -D schedule="$s" --world "$pp" -o "$t/$model-$pp-$s" 2>/dev/null; fi
  plan "$model" "$pp" "$s" "$t/cpu.profile" "$t/$model-$pp-$s.plan"
  sed -n 's/^#   bubble: \([0-9.]*\)%.*/\1/p' "$t/$model-$pp-$s.plan" >"$t/$model-$pp-$s.pred"
done
last=0 # the last round with every configuration measured (DETAIL's)
for r in $(seq 1 "$rounds"); do
  for c in "${configs[@]}"; do
    IFS=: read -r model pp s <<<"$c"
    if [ -n "${BUDGET:-}" ] && [ "$SECONDS" -ge "$BUDGET" ]; then
      echo "[${SECONDS} s] BUDGET=$BUDGET s spent: no more runs (round $r)" >&2
      break 2
    fi
    mpirun --mca pml ob1 -np "$pp" "$t/$model-$pp-$s" "${run[@]}" --trace "$t/$model-$pp-$s.$r.json" >/dev/null
    python3 bench/pp_bubble.py "$t/$model-$pp-$s.$r.json" >>"$t/$model-$pp-$s.meas"
    tail -n 1 "$t/$model-$pp-$s.meas" | awk -v h="[$SECONDS s] round $r $model pp $pp $s" -v p="$(cat "$t/$model-$pp-$s.pred")" \
      '{ printf "%s: measured %.1f%% (steps %.1f..%.1f%%), replayed %.1f%%, steady %.1f%% (spread %.2f), predicted %s%%\n", h, 100 * $1,
         100 * $2, 100 * $3, 100 * $5, 100 * $6, $7, p }' >&2
  done
  last=$r
done
printf '%-7s %-3s %-12s %10s %8s %10s %10s %9s %9s %9s %7s %18s\n' model pp schedule predicted steady replayed measured "m/pred" \
  "st/pred" "m/repl" spread "per-step min..max"
for c in "${configs[@]}"; do
  IFS=: read -r model pp s <<<"$c"
  [ -s "$t/$model-$pp-$s.meas" ] || { printf '%-7s %-3s %-12s %9.1f%%   (not run: BUDGET)\n' "$model" "$pp" "$s" "$(cat "$t/$model-$pp-$s.pred")"; continue; }
  pred=$(cat "$t/$model-$pp-$s.pred")
  col() { # the median over the rounds of a .meas column
    awk -v c="$1" '{ print $c }' "$t/$model-$pp-$s.meas" | sort -g | awk '{ v[n++] = $1 }
      END { print n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2 }'
  }
  repl=$(col 5) steady=$(col 6) spread=$(col 7)
  sort -g "$t/$model-$pp-$s.meas" | awk -v model="$model" -v pp="$pp" -v s="$s" -v pred="$pred" -v r="$repl" -v st="$steady" \
    -v sp="$spread" '
    BEGIN { n = 0 }
    { med[n] = $1; if (n == 0 || $2 < lo) lo = $2; if ($3 > hi) hi = $3; n++ }
    END { m = n % 2 ? med[(n - 1) / 2] : (med[n / 2 - 1] + med[n / 2]) / 2
          printf "%-7s %-3s %-12s %9.1f%% %7.1f%% %9.1f%% %9.1f%% %9.2f %9.2f %9.2f %7.2f %8.1f..%.1f%%\n", model, pp, s, pred, 100 * st,
                 100 * r, 100 * m, 100 * m / pred, 100 * st / pred, m / r, sp, 100 * lo, 100 * hi }'
done
if [ -n "${DETAIL:-}" ] && [ "$last" -gt 0 ]; then # per configuration: the plan's instruction and transfer times, and the last round's measured ones
  for c in "${configs[@]}"; do
    IFS=: read -r model pp s <<<"$c"
    echo "$model pp $pp $s: predicted"
    sed -n 's/^#     \(stage [0-9]*: F .*\)/  \1/p' "$t/$model-$pp-$s.plan"
    echo "$model pp $pp $s: measured (round $last, medians over the steps)"
    python3 bench/pp_bubble.py "$t/$model-$pp-$s.$last.json" --times | sed 's/^/  /'
  done
fi
