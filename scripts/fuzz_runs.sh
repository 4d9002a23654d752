#!/usr/bin/env bash
# The plan-space fuzzer's samples run for real: tests/passes/fuzz_plans draws models and plans and proves each
# accepted one equal to one rank in the fp64 interpreter; this builds those trainers (f32, CPU target, 2 to
# 4 ranks: `fuzz_plans --emit`) and their single-rank programs with shardc, runs both for 3 AdamW steps under
# mpirun on token shards of the sample's vocabulary, and checks every step's loss and the validation loss after
# them within 1e-5 relative (the multi-rank e2e tests' tolerance, tests/codegen/layouts.sh) and that nothing
# hangs (SHARDRT_TIMEOUT 30 s, 180 s a run). What it reaches that the interpreter does not: the generated C, the
# kernels, the runtime's collectives and point-to-point under real concurrency, the trainer's eval. Found on its
# first run (seed 20100332): eval under cp 2 x ZeRO-2 x recompute full with accumulation read position ids whose
# bytes step had given away (tests/codegen/cp_eval.model); a deadlock of pp 2 x cp 2 interleaved was found by
# running plans by hand the same day. On demand, not in the test suite.
#
# usage: scripts/fuzz_runs.sh [SECONDS (default 600)] [FROM (default 20000000)] [BUILD (default build)] [cuda]
#   cuda: the CUDA target's samples too, run on the emulated device (SHARDRT_DEVICE=emu; slower), against the
#   single-rank program on the CPU target
# Prints one line a sample and a summary; each failure's folder (its model files, the arguments, the logs) is
# kept under BUILD/fuzz_runs/SEED; exit 1 if any failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
secs="${1:-600}"
from="${2:-20000000}"
build="$root/${3:-build}"
emit_cuda=()
[ "${4:-}" = cuda ] && emit_cuda=(--emit-cuda)
shardc="$build/shardc"
fuzz="$build/tests/passes/fuzz_plans"
[ -x "$shardc" ] && [ -x "$fuzz" ] || { echo "fuzz_runs: build first (bash scripts/build.sh): no $shardc or $fuzz"; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
out="$build/fuzz_runs"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# a token shard (llm.c's format: magic 20240520, version 1, count; uint16 tokens) of 4000 tokens under VOCAB
shard() {
  python3 - "$1" "$2" "$3" <<'EOF'
import random, struct, sys
path, vocab, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(seed)
n = 4000
hdr = [0] * 256
hdr[0], hdr[1], hdr[2] = 20240520, 1, n
with open(path, "wb") as f:
    f.write(struct.pack("<256i", *hdr))
    f.write(struct.pack("<%dH" % n, *[random.randrange(vocab) for _ in range(n)]))
EOF
}
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; grep -o '"val_loss":[^,}]*' "$1" | cut -d: -f2; }
ran=0 failed=0 seed=$from
start=$(date +%s)
while [ $(($(date +%s) - start)) -lt "$secs" ]; do
  rm -rf "$work/emit" && mkdir -p "$work/emit"
  "$fuzz" --from "$seed" --count 50 --emit "$work/emit" "${emit_cuda[@]}" >/dev/null 2>&1
  seed=$((seed + 50))
  for d in "$work"/emit/*; do
    [ -d "$d" ] || continue
    [ $(($(date +%s) - start)) -lt "$secs" ] || break
    s=${d##*/}
    read -r _ world _ vocab _ seq _ target <"$d/shape"
    mapfile -t pargs <"$d/plan.args"
    mapfile -t rargs <"$d/ref.args"
    why=""
    dev=()
    [ "$target" = cuda ] && dev=(-x SHARDRT_DEVICE=emu) # (the CUDA target's trainer on the emulated device)
    shard "$d/data.bin" "$vocab" "$s"
    run=(--data "$d/data.bin" --steps 3 --eval-every 0 --val-batches 1 --threads 1)
    if ! "$shardc" build "$d/plan.model" "${pargs[@]}" -o "$d/p" >"$d/build.log" 2>&1; then why="the plan does not build"
    elif ! "$shardc" build "$d/ref.model" "${rargs[@]}" -o "$d/r" >>"$d/build.log" 2>&1; then why="the single-rank program does not build"
    elif ! timeout 180 "$d/r" "${run[@]}" --log "$d/r.jsonl" >"$d/r.log" 2>&1; then why="the single-rank trainer failed"
    elif ! SHARDRT_TIMEOUT=30 timeout 300 mpirun --mca pml ob1 -np "$world" -x SHARDRT_TIMEOUT "${dev[@]}" "$d/p" "${run[@]}" \
      --log "$d/p.jsonl" >"$d/p.log" 2>&1; then why="the $world-rank trainer failed: $(grep -m1 -i 'watchdog\|error' "$d/p.log" | cut -c1-160)"
    else
      why=$(paste <(losses "$d/r.jsonl") <(losses "$d/p.jsonl") | awk '
        { n++; d = $2 - $1; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r; if (r > 1e-5) bad++ }
        END { if (n != 4) print n " losses logged, want 3 and the validation loss"; else if (bad) printf "%d losses beyond 1e-5 (worst %.2e)", bad, w }')
    fi
    ran=$((ran + 1))
    if [ -n "$why" ]; then
      failed=$((failed + 1))
      rm -rf "${out:?}/$s" && cp -r "$d" "$out/$s"
      echo "FAIL seed $s ($world ranks, $(tr '\n' ' ' <"$d/plan.args")): $why; kept in $out/$s"
    else
      echo "ok   seed $s ($world ranks, $(tr '\n' ' ' <"$d/plan.args" | sed 's/-D //g'))"
    fi
  done
done
echo "fuzz_runs: $ran samples run from seed $from in $(($(date +%s) - start)) s, $failed failed"
[ "$failed" -eq 0 ]
