#!/usr/bin/env bash
# Sharded against logical checkpoints on 4 CPU ranks (dp=2 x tp=2): the time to save and to load
# (resume) one checkpoint and each rank's peak resident memory, same model and work, formats
# interleaved round by round (the machine is shared: best of ROUNDS).
#   bench/ckpt_sharded.sh [SHARDC] [ROUNDS] [DEFINES] [BASELINE_SHARDC]
# BASELINE_SHARDC: a shardc from before sharded checkpoints (say the main checkout's): its trainer's
# checkpoints are the "today" rows (gathered on every rank, written by rank 0; read whole on every
# rank, then scattered).
# Model: the tiny GPT widened to d=512, 8 layers (25.4 M parameters: 97 MiB of f32 weights, 291 MiB
# with the AdamW moments), seq 64, micro-batch 2 per rank.
# Per run (ranks wrapped in /usr/bin/time for their peak RSS):
#   base    2 steps, no checkpoint: the run's own peak
#   save    2 steps and a checkpoint at the end: rank 0's "snapshot in X s" (training stops that
#           long) and "written (Y s in the background)"; every rank's peak
#   load    --resume of that checkpoint and no step (--steps 2): rank 0's "read in Z s" (the today
#           trainer does not print it), the whole run's wall time; every rank's peak, against base0
#           (--steps 0: the allocation and a validation, no step, no checkpoint)
# The peak above base (base0 for a load) is what the checkpoint costs in memory on that rank.
set -euo pipefail
cd "$(dirname "$0")/.."
shardc=$(realpath "${1:-build/shardc}")
rounds=${2:-3}
read -r -a extra <<<"${3:-}"
baseline=${4:-}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
bash scripts/gen_corpus.sh "$t/data.txt" 200000 3 >/dev/null
m=(models/tiny.model -D d=512 -D layers=8 -D heads=8 -D seq=64 -D micro_batch=2 -D dp=2 -D tp=2 "${extra[@]}")
"$shardc" build "${m[@]}" --world 4 -o "$t/tr" >/dev/null
formats=(logical sharded)
if [ -n "$baseline" ]; then "$baseline" build "${m[@]}" --world 4 -o "$t/tr_today" >/dev/null; formats=(today "${formats[@]}"); fi
run=(--data "$t/data.txt" --eval-every 0 --val-batches 1 --threads 1)
mpi=(mpirun --mca pml ob1 -np 4 /usr/bin/time -f "maxrss_kb %M")
echo "nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg); dp=2 x tp=2 on 4 ranks; $(grep -m1 -o '[0-9.]* M params\|[0-9]* parameters' <("$t/tr" --help) || true)"
peaks() { grep -o 'maxrss_kb [0-9]*' "$1" | awk '{ printf "%s%.0f", (NR > 1 ? "/" : ""), $2 / 1024 }'; }
maxpeak() { grep -o 'maxrss_kb [0-9]*' "$1" | awk '{ if ($2 > m) m = $2 } END { printf "%.0f", m / 1024 }'; }
printf '%-10s %-5s %8s %8s %8s %8s %22s %9s\n' format round snap_s write_s read_s wall_s "peak_MiB_per_rank" "max_MiB"
for r in $(seq 1 "$rounds"); do
  "${mpi[@]}" "$t/tr" "${run[@]}" --steps 2 --save-to '' >"$t/base.out" 2>&1
  printf '%-10s %-5s %8s %8s %8s %8s %22s %9s\n' base "$r" - - - - "$(peaks "$t/base.out")" "$(maxpeak "$t/base.out")"
  "${mpi[@]}" "$t/tr" "${run[@]}" --steps 0 --save-to '' >"$t/base0.out" 2>&1
  printf '%-10s %-5s %8s %8s %8s %8s %22s %9s\n' base0 "$r" - - - - "$(peaks "$t/base0.out")" "$(maxpeak "$t/base0.out")"
  for f in "${formats[@]}"; do
    rm -rf "$t/ck_$f"
    tr=$t/tr fmt=(--ckpt-format "$f")
    [ "$f" = today ] && tr=$t/tr_today fmt=()
    "${mpi[@]}" "$tr" "${run[@]}" --steps 2 --save-to "$t/ck_$f" "${fmt[@]}" >"$t/save.out" 2>&1
    snap=$(grep -o 'snapshot in [0-9.]* s' "$t/save.out" | awk '{ print $3 }' || true)
    write=$(grep -o 'written ([0-9.]* s' "$t/save.out" | tr -d '(' | awk '{ print $2 }' || true)
    printf '%-10s %-5s %8s %8s %8s %8s %22s %9s\n' "$f" "$r" "$snap" "$write" - - "$(peaks "$t/save.out")" "$(maxpeak "$t/save.out")"
    s0=$(date +%s.%N)
    "${mpi[@]}" "$tr" "${run[@]}" --steps 2 --resume "$t/ck_$f" --save-to "$t/ck_$f" >"$t/load.out" 2>&1
    wall=$(awk -v a="$s0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    read_s=$(grep -o 'read in [0-9.]* s' "$t/load.out" | awk '{ print $3 }' || true)
    printf '%-10s %-5s %8s %8s %8s %8s %22s %9s\n' "$f-in" "$r" - - "${read_s:--}" "$wall" "$(peaks "$t/load.out")" "$(maxpeak "$t/load.out")"
  done
done
du -sh "$t"/ck_logical/step_* "$t"/ck_sharded/step_* | sed "s|$t/||"
