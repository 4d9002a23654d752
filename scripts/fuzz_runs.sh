#!/usr/bin/env bash
# The plan-space fuzzer's samples run for real: tests/passes/fuzz_plans draws models and plans and proves each
# accepted one equal to one rank in the fp64 interpreter; this builds those trainers (CPU target, f32 or bf16, 2
# to 4 ranks: `fuzz_plans --emit`) and their single-rank programs with shardc, runs both for 3 AdamW steps under
# mpirun on token shards of the sample's vocabulary, and checks every step's loss and the validation loss after
# them and that nothing hangs (SHARDRT_TIMEOUT 30 s, 300 s a run). What it reaches that the interpreter does
# not: the generated C, the kernels, the runtime's collectives and point-to-point under real concurrency, the
# trainer's eval, its checkpoints. Found on its first run (seed 20100332): eval under cp 2 x ZeRO-2 x recompute
# full with accumulation read position ids whose bytes step had given away (tests/codegen/cp_eval.model); a
# deadlock of pp 2 x cp 2 interleaved was found by running plans by hand the same day. The checkpoint checks'
# first run (seed 20700029, dp 2 x zero 1): a logical checkpoint did not resume under ZeRO 1 / 2 where the
# state of a stacked parameter is split over dp along the layers (runtime/train/ckpt.c rt_ckpt_per_layer).
#
# Checkpoints across layouts: both runs also save at step 2 (the multi-rank one sharded for an even seed,
# logical for an odd one), and three runs resume them for step 3:
#   the single-rank program from the layout's step 2     (what the layout saves: its ZeRO shards, its pp
#                                                          stages' and tp / cp blocks, gathered or not)
#   the layout from the single-rank program's step 2     (what the layout loads into its blocks)
#   the layout from its own step 2                       (a round trip: bit-identical to the uninterrupted
#                                                          run, its step-3 log line and its step-3 checkpoint)
# And the layout's step 2 (sharded: converted by `shardc ckpt convert`) must hold the single rank's entries
# (names, dtypes, shapes: `shardc ckpt info`). The first two against the uninterrupted single-rank step 3 and validation loss, within the same tolerance
# as the runs themselves: their step-2 state is the layout's or the single rank's, which the uninterrupted
# comparison already holds within it, and one step more from either is the comparison's own step 3.
# Tolerance (relative, every loss): f32 1e-5, the multi-rank e2e tests' (tests/codegen/layouts.sh); bf16
# 2^-10, the loss bound of the bf16 multi-rank e2e tests (u / 4, u = 2^-8: tests/e2e/cuda_multirank.sh).
#
# usage: scripts/fuzz_runs.sh [SECONDS (default 600)] [FROM (default 20000000)] [BUILD (default build)] [cuda]
#        scripts/fuzz_runs.sh --seeds S1,S2,... [BUILD] [cuda]   those seeds, each of which must give a sample
#   cuda: the CUDA target's samples too, run on the emulated device (SHARDRT_DEVICE=emu; slower), against the
#   single-rank program on the CPU target
#   BUILD: relative to the repository, or absolute
# Prints one line a sample (with its worst relative loss difference) and a summary; each failure's folder (its model files, the arguments, the logs, the
# checkpoints) is kept under BUILD/fuzz_runs/SEED; exit 1 if any failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seeds=()
if [ "${1:-}" = --seeds ]; then
  IFS=, read -r -a seeds <<<"${2:?--seeds needs a comma-separated list}"
  shift 2
  secs=0 from=${seeds[0]}
  set -- 0 "$from" "$@"
else
  secs="${1:-600}"
  from="${2:-20000000}"
fi
build="${3:-build}"
[[ "$build" = /* ]] || build="$root/$build"
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
# close REF LOG TOL WHAT: LOG's losses (its last ones, as many as it logged) against REF's last ones, each
# within TOL relative; prints why not (nothing when they are)
close() {
  local n
  n=$(losses "$2" | wc -l)
  [ "$n" -ge 2 ] || { echo "$4: $n losses logged, want the steps' and the validation loss"; return; }
  paste <(losses "$1" | tail -n "$n") <(losses "$2") | awk -v tol="$3" -v what="$4" '
    { d = $2 - $1; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r; if (r > tol) bad++ }
    END { if (bad) printf "%s: %d losses beyond %g (worst %.2e)", what, bad, tol, w
          printf "%.2e\n", w >>(ENVIRON["d"] "/worst") }'
}
# the step-3 line and the validation loss, without the timings
line3() { grep '"step":3' "$1" | sed 's/"ms".*"mem_bytes":[0-9]*//'; }
same_ckpt() {
  [ -n "$(ls "$1" 2>/dev/null)" ] && [ "$(ls "$1")" = "$(ls "$2" 2>/dev/null)" ] || return 1
  local f
  for f in "$1"/*; do cmp -s "$f" "$2/${f##*/}" || return 1; done
}
# check DIR: builds and runs sample DIR; prints why it fails (nothing when it passes); DIR/worst: the worst
# relative difference of each comparison
check() {
  export d=$1
  local s=${1##*/} world vocab seq target prec tol fmt
  read -r _ world _ vocab _ seq _ target _ prec <"$d/shape"
  tol=1e-5
  [ "$prec" = bf16 ] && tol=0.0009765625
  fmt=sharded
  [ $((s % 2)) = 1 ] && fmt=logical
  local pargs rargs dev=() run mp
  mapfile -t pargs <"$d/plan.args"
  mapfile -t rargs <"$d/ref.args"
  [ "$target" = cuda ] && dev=(-x SHARDRT_DEVICE=emu) # (the CUDA target's trainer on the emulated device)
  shard "$d/data.bin" "$vocab" "$s"
  run=(--data "$d/data.bin" --eval-every 0 --val-batches 1 --threads 1)
  mp=(env SHARDRT_TIMEOUT=30 timeout 300 mpirun --mca pml ob1 -np "$world" -x SHARDRT_TIMEOUT "${dev[@]}" "$d/p")
  mpfail() { echo "the $world-rank trainer $1 failed: $(grep -m1 -i 'watchdog\|error' "$2" | cut -c1-160)"; }
  "$shardc" build "$d/plan.model" "${pargs[@]}" -o "$d/p" >"$d/build.log" 2>&1 || { echo "the plan does not build"; return; }
  "$shardc" build "$d/ref.model" "${rargs[@]}" -o "$d/r" >>"$d/build.log" 2>&1 ||
    { echo "the single-rank program does not build"; return; }
  timeout 180 "$d/r" "${run[@]}" --steps 3 --log "$d/r.jsonl" --save-to "$d/ckr" --ckpt-every 2 --keep 0 \
    >"$d/r.log" 2>&1 || { echo "the single-rank trainer failed"; return; }
  [ "$(losses "$d/r.jsonl" | wc -l)" = 4 ] || { echo "the single-rank trainer logged $(losses "$d/r.jsonl" | wc -l) losses, want 4"; return; }
  "${mp[@]}" "${run[@]}" --steps 3 --log "$d/p.jsonl" --save-to "$d/ckp" --ckpt-every 2 --keep 0 --ckpt-format "$fmt" \
    >"$d/p.log" 2>&1 || { mpfail "" "$d/p.log"; return; }
  [ "$(losses "$d/p.jsonl" | wc -l)" = 4 ] || { echo "the $world-rank trainer logged $(losses "$d/p.jsonl" | wc -l) losses, want 4"; return; }
  close "$d/r.jsonl" "$d/p.jsonl" "$tol" "3 steps"
  # the checkpoints across layouts
  local c2=step_00000002 c3=step_00000003 lc="$d/ckp/step_00000002"
  # the layout's step 2 (a sharded one converted to a single file) holds the single rank's entries
  if [ "$fmt" = sharded ]; then
    lc="$d/cv"
    "$shardc" ckpt convert "$d/ckp/$c2" "$lc" >"$d/cv.log" 2>&1 || { echo "shardc ckpt convert of the $fmt step 2 failed"; return; }
  fi
  entries() { "$shardc" ckpt info "$1" 2>&1 | grep '^  '; }
  [ "$(entries "$d/ckr/$c2")" = "$(entries "$lc")" ] ||
    echo "the $world-rank $fmt step 2's entries (names, dtypes, shapes) differ from the single rank's"
  timeout 180 "$d/r" "${run[@]}" --resume "$d/ckp/$c2" --log "$d/rp.jsonl" >"$d/rp.log" 2>&1 ||
    { echo "the single-rank trainer resumed from the $world-rank $fmt step 2 failed: $(grep -m1 error "$d/rp.log")"; return; }
  close "$d/r.jsonl" "$d/rp.jsonl" "$tol" "the single rank resumed from the $world-rank $fmt step 2"
  "${mp[@]}" "${run[@]}" --resume "$d/ckr/$c2" --log "$d/pr.jsonl" >"$d/pr.log" 2>&1 ||
    { mpfail "resumed from the single rank's step 2" "$d/pr.log"; return; }
  close "$d/r.jsonl" "$d/pr.jsonl" "$tol" "the $world ranks resumed from the single rank's step 2"
  "${mp[@]}" "${run[@]}" --resume "$d/ckp/$c2" --log "$d/pq.jsonl" --save-to "$d/ckq" --ckpt-format "$fmt" \
    >"$d/pq.log" 2>&1 || { mpfail "resumed from its own $fmt step 2" "$d/pq.log"; return; }
  [ "$(line3 "$d/p.jsonl")" = "$(line3 "$d/pq.jsonl")" ] ||
    echo "the $world ranks resumed from their own $fmt step 2: step 3 logged otherwise than uninterrupted"
  same_ckpt "$d/ckp/$c3" "$d/ckq/$c3" ||
    echo "the $world ranks resumed from their own $fmt step 2: the step-3 checkpoint differs from the uninterrupted one's"
}
ran=0 failed=0 seed=$from k=0
start=$(date +%s)
while if [ ${#seeds[@]} -gt 0 ]; then [ "$k" -lt ${#seeds[@]} ]; else [ $(($(date +%s) - start)) -lt "$secs" ]; fi; do
  rm -rf "$work/emit" && mkdir -p "$work/emit"
  if [ ${#seeds[@]} -gt 0 ]; then
    seed=${seeds[$k]} k=$((k + 1))
    "$fuzz" --from "$seed" --count 1 --emit "$work/emit" "${emit_cuda[@]}" >/dev/null 2>&1
    if [ ! -d "$work/emit/$seed" ]; then
      failed=$((failed + 1))
      echo "FAIL seed $seed: no sample of 2 to 4 ranks proven equal (the sampler changed? choose another seed)"
      continue
    fi
  else
    "$fuzz" --from "$seed" --count 50 --emit "$work/emit" "${emit_cuda[@]}" >/dev/null 2>&1
    seed=$((seed + 50))
  fi
  for d in "$work"/emit/*; do
    [ -d "$d" ] || continue
    [ ${#seeds[@]} -gt 0 ] || [ $(($(date +%s) - start)) -lt "$secs" ] || break
    s=${d##*/}
    read -r _ world _ _ _ _ _ target _ prec <"$d/shape"
    why=$(check "$d")
    ran=$((ran + 1))
    desc="$world ranks, $target $prec, $(tr '\n' ' ' <"$d/plan.args" | sed 's/-D //g')"
    if [ -n "$why" ]; then
      failed=$((failed + 1))
      rm -rf "${out:?}/$s" && cp -r "$d" "$out/$s"
      echo "FAIL seed $s ($desc): $(tr '\n' ' ' <<<"$why"); kept in $out/$s"
    else
      echo "ok   seed $s ($desc; worst |rel| $(sort -g "$d/worst" | tail -1))"
    fi
  done
done
echo "fuzz_runs: $ran samples run from seed $from in $(($(date +%s) - start)) s, $failed failed"
[ "$failed" -eq 0 ]
