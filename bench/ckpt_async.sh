#!/usr/bin/env bash
# What a checkpoint costs the training step, asynchronous against synchronous: GPT-2 124M on 2 CPU
# ranks (dp=2, zero 1 as the model file plans it; micro-batch 1 x seq 64 to keep the steps short),
# sharded checkpoints, modes interleaved round by round (the machine is shared: best of ROUNDS).
#   bench/ckpt_async.sh [SHARDC] [ROUNDS] [STEPS] [EVERY]
# Per round, three runs of STEPS steps (default 7) with --ckpt-every EVERY (default 3: checkpoints
# inside the loop at 3 and 6; the one at the end is outside the timed loop):
#   none   --save-to '': no checkpoint
#   sync   SHARDRT_CKPT_SYNC=1: each checkpoint written on the training thread, straight from the
#          training memory (no snapshot): training stops for the whole write
#   async  the default: a snapshot of the tensors this rank writes (into a buffer mapped before the
#          first step), then the writer thread
# Columns: the stall per in-loop checkpoint as rank 0 measures it around the save (async: the
# snapshot, plus any wait for the previous write; sync: the whole write), the timed loop's seconds
# ("done: N step(s) in T s"), and the loop's excess over the round's no-checkpoint run per
# checkpoint (which also holds what the writer thread costs the step while it runs beside it).
# The summary divides async by sync, both taken as the best of the rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
shardc=$(realpath "${1:-build/shardc}")
rounds=${2:-2}
steps=${3:-7}
every=${4:-3}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
python3 bench/gpt2_tokens.py "$t/tok.bin" 2>/dev/null || { echo "python3 is needed to write the token shard"; exit 1; }
"$shardc" build models/gpt2-124m.model -D micro_batch=1 -D batch=2 -D seq=64 -D dp=2 --world 2 -o "$t/tr" 2>/dev/null >/dev/null
ncks=$(( (steps - 1) / every )) # in-loop checkpoints (the last step's is outside the loop)
[ "$ncks" -ge 1 ] || { echo "STEPS $steps and EVERY $every leave no checkpoint inside the loop"; exit 1; }
run=(--data "$t/tok.bin" --val "$t/tok.bin" --val-batches 1 --eval-every 0 --steps "$steps" --threads 1)
echo "nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg); gpt2-124m dp=2 on 2 CPU ranks, micro-batch 1 x 64, $steps steps, --ckpt-every $every ($ncks checkpoint(s) in the loop)"
printf '%-6s %-5s %22s %16s %9s %16s\n' mode round "stall_s_per_ckpt" each_s loop_s "excess_s_per_ckpt"
# stall OUT: rank 0's stall per in-loop checkpoint (mean over them)
stall() {
  grep -E "step_0*([0-9]+): snapshot" "$1" | awk -v steps="$steps" '
    { match($0, /step_0*[0-9]+/); s = substr($0, RSTART + 5, RLENGTH - 5) + 0; if (s >= steps) next
      match($0, / in [0-9.]+ s/); v = substr($0, RSTART + 4, RLENGTH - 6)
      w = 0; if (match($0, /after [0-9.]+ s waiting/)) w = substr($0, RSTART + 6, RLENGTH - 16)
      tot += v + w; n++ }
    END { if (n) printf "%.3f", tot / n; else printf "-" }'
}
# each OUT: the same, checkpoint by checkpoint
each() {
  grep -E "step_0*([0-9]+): snapshot" "$1" | awk -v steps="$steps" '
    { match($0, /step_0*[0-9]+/); s = substr($0, RSTART + 5, RLENGTH - 5) + 0; if (s >= steps) next
      match($0, / in [0-9.]+ s/); v = substr($0, RSTART + 4, RLENGTH - 6)
      w = 0; if (match($0, /after [0-9.]+ s waiting/)) w = substr($0, RSTART + 6, RLENGTH - 16)
      printf "%s%.2f", (n++ ? "/" : ""), v + w }'
}
loop_s() { grep -o 'done: [0-9]* step(s) in [0-9.]* s' "$1" | awk '{ print $5 }'; }
for r in $(seq 1 "$rounds"); do
  for mode in none sync async; do
    rm -rf "$t/ck"
    env=() save=(--save-to "$t/ck" --ckpt-every "$every")
    [ "$mode" = none ] && save=(--save-to '')
    [ "$mode" = sync ] && env=(-x SHARDRT_CKPT_SYNC=1)
    mpirun --mca pml ob1 "${env[@]}" -np 2 "$t/tr" "${run[@]}" "${save[@]}" >"$t/$mode.out" 2>&1 ||
      { cat "$t/$mode.out"; echo "FAIL: $mode"; exit 1; }
    l=$(loop_s "$t/$mode.out")
    [ "$mode" = none ] && base=$l
    st=-
    ex=-
    ea=-
    if [ "$mode" != none ]; then
      st=$(stall "$t/$mode.out")
      ea=$(each "$t/$mode.out")
      ex=$(awk -v a="$l" -v b="$base" -v n="$ncks" 'BEGIN { printf "%.3f", (a - b) / n }')
      echo "$mode $st $ex" >>"$t/rows"
    fi
    printf '%-6s %-5s %22s %16s %9s %16s\n' "$mode" "$r" "$st" "$ea" "$l" "$ex"
  done
done
awk '{ if (!($1 in s) || $2 < s[$1]) s[$1] = $2; if (!($1 in e) || $3 < e[$1]) e[$1] = $3 }
  END { printf "best of the rounds: stall per checkpoint async %.3f s, sync %.3f s: async/sync %.1f%%; loop excess per checkpoint async %.3f s, sync %.3f s: %.1f%%\n",
        s["async"], s["sync"], 100 * s["async"] / s["sync"], e["async"], e["sync"], 100 * e["async"] / e["sync"] }' "$t/rows"
echo "load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
