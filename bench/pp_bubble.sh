#!/usr/bin/env bash
# The pipeline bubble measured on CPU ranks (the trainer's --trace, bench/pp_bubble.py) next to the
# plan's prediction (`shardc plan --profile`: the schedule played with each instruction's time from
# the cost model, calibrated on this machine first by bench_calibrate as bench/plan_rank.sh does, and
# each transfer's from its bytes over the link, measured by bench/p2p_link.c: docs/pipeline.md "The
# predicted timeline") and to the
# same schedule replayed with the run's own measured instruction times, transfers free
# (pp_bubble.py's replay): GPipe, 1F1B, interleaved (2 chunks) and zb, at pp 2 and pp 4, for the
# tiny GPT and a Llama-shaped model (8 layers, untied, RoPE, GQA), 8 micro-batches of one sequence,
# 1 thread per rank, STEPS steps (the first skipped), the configurations interleaved over ROUNDS
# rounds; printed: the median over the rounds of each run's median over its steps (measured and
# replayed), the ratios measured / predicted and measured / replayed, and the range of the single
# measured steps. PP (default "2 4") picks the pipeline degrees; DETAIL=1 adds, per configuration, the
# plan's predicted per-stage instruction and transfer times and the last round's measured ones. At pp 4 a machine with fewer than 4
# free cores is oversubscribed: ranks wait for a core, which no prediction counts.
#   bench/pp_bubble.sh [SHARDC] [STEPS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
shardc=${1:-build/shardc}
steps=${2:-6}
rounds=${3:-1}
pps=${PP:-2 4}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
bash scripts/gen_corpus.sh "$t/data.txt" 400000 3 >/dev/null
# both models on the CPU topology with a device per rank (models/topo/cpu.topo has 2; pp 4 needs 4 on
# the node, else the plan takes stages 2 and 3 for another node's and their transfers for the network's)
sed 's/cpu x 2/cpu x 4/; s/topology cpu /topology cpu4 /' models/topo/cpu.topo >"$t/cpu4.topo"
calibrate=$(dirname "$shardc")/bench/bench_calibrate
"$calibrate" "$t/cpu.profile" 1 >"$t/calibrate.log" # the device's figures, one thread (the trainers' --threads 1)
# and the in-node link the transfers cross: shardrt's point-to-point messages, 2 ranks (node_latency, node_bandwidth)
mpirun --mca pml ob1 -np 2 "$(dirname "$shardc")/bench/p2p_link" "$t/cpu.profile" >"$t/link.log"
tiny=(models/tiny.model --topology "$t/cpu4.topo" -D d=128 -D seq=128 -D layers=8 -D batch=8 -D micro_batch=1 -D dp=1)
llama=(models/llama3-8b.model --topology "$t/cpu4.topo" -D vocab=256 -D seq=128 -D d=128 -D heads=4 -D kv_heads=2 -D layers=8 -D ffn=256
  -D batch=8 -D micro_batch=1 -D dp=1 -D tp=1 -D sp=off -D zero=0 -D recompute=none -D precision=f32)
run=(--data "$t/data.txt" --steps "$steps" --eval-every 0 --val-batches 1 --threads 1 --save-to "$t/ck")
configs=()
for model in tiny llama; do
  for pp in $pps; do
    for s in gpipe 1f1b interleaved zb; do configs+=("$model:$pp:$s"); done
  done
done
echo "nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg), $steps steps (first skipped), $rounds round(s); $(date -u '+%F %H:%M UTC')"
echo "calibrated: $(sed 's/ -> .*//' "$t/calibrate.log"); $(cat "$t/link.log")"
for c in "${configs[@]}"; do
  IFS=: read -r model pp s <<<"$c"
  declare -n m=$model
  "$shardc" build "${m[@]}" -D pp="$pp" -D schedule="$s" --world "$pp" -o "$t/$model-$pp-$s" 2>/dev/null
  "$shardc" plan "${m[@]}" -D pp="$pp" -D schedule="$s" --world "$pp" --profile "$t/cpu.profile" >"$t/$model-$pp-$s.plan" 2>/dev/null
  sed -n 's/^#   bubble: \([0-9.]*\)%.*/\1/p' "$t/$model-$pp-$s.plan" >"$t/$model-$pp-$s.pred"
done
for r in $(seq 1 "$rounds"); do
  for c in "${configs[@]}"; do
    IFS=: read -r model pp s <<<"$c"
    mpirun --mca pml ob1 -np "$pp" "$t/$model-$pp-$s" "${run[@]}" --trace "$t/$model-$pp-$s.$r.json" >/dev/null
    python3 bench/pp_bubble.py "$t/$model-$pp-$s.$r.json" >>"$t/$model-$pp-$s.meas"
  done
done
printf '%-7s %-3s %-12s %10s %10s %10s %9s %9s %18s\n' model pp schedule predicted replayed measured "m/pred" "m/repl" \
  "per-step min..max"
for c in "${configs[@]}"; do
  IFS=: read -r model pp s <<<"$c"
  pred=$(cat "$t/$model-$pp-$s.pred")
  repl=$(awk '{ print $5 }' "$t/$model-$pp-$s.meas" | sort -g | awk '{ v[n++] = $1 }
    END { print n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2 }')
  sort -g "$t/$model-$pp-$s.meas" | awk -v model="$model" -v pp="$pp" -v s="$s" -v pred="$pred" -v r="$repl" '
    BEGIN { n = 0 }
    { med[n] = $1; if (n == 0 || $2 < lo) lo = $2; if ($3 > hi) hi = $3; n++ }
    END { m = n % 2 ? med[(n - 1) / 2] : (med[n / 2 - 1] + med[n / 2]) / 2
          printf "%-7s %-3s %-12s %9.1f%% %9.1f%% %9.1f%% %9.2f %9.2f %8.1f..%.1f%%\n", model, pp, s, pred, 100 * r, 100 * m,
                 100 * m / pred, m / r, 100 * lo, 100 * hi }'
done
if [ -n "${DETAIL:-}" ]; then # per configuration: the plan's instruction and transfer times, and the last round's measured ones
  for c in "${configs[@]}"; do
    IFS=: read -r model pp s <<<"$c"
    echo "$model pp $pp $s: predicted"
    sed -n 's/^#     \(stage [0-9]*: F .*\)/  \1/p' "$t/$model-$pp-$s.plan"
    echo "$model pp $pp $s: measured (round $rounds, medians over the steps)"
    python3 bench/pp_bubble.py "$t/$model-$pp-$s.$rounds.json" --times | sed 's/^/  /'
  done
fi
