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
# And three checks on a third of the samples each (drawn from the seed; the sample's line names them):
#   a graceful stop: SIGTERM to one rank before a random step (1, 2 or 3 of 3), all ranks stopped after it with
#     status 75 and its checkpoint committed, the resume bit-identical to the uninterrupted run (stop_check);
#   --sample from the layout's step-3 checkpoint, by the layout and by the single rank: the same tokens
#     (sample_check; f32 and the CPU target's bf16);
#   the layout's step 2 resumed under another layout of the same model and recipe, on the sample's target
#     (drawn: `layouts`; dp, tp, pp, cp, sp, the schedules interleaved included, cp_mode ring or all2all, ZeRO
#     with or without offload, recompute) for step 3 against the single rank's, within the tolerance
#     (relayout_check).
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
# layouts D SEED TARGET DP TP PP CP: other layouts of sample D's model and recipe (its single-rank program's
# source with a parallel block of their own, the same global batch, drawn from SEED), in a random order: those
# of 2 or 4 ranks whose degrees are not the sample's (DP TP PP CP) and that pass the obvious checks (dp x the
# micro-steps divide the batch, tp the heads and kv heads, 2 cp the sequence, pp at most the layers; stages
# balanced by the cost model where pp does not divide them), each with drawn:
#   sp on / off (tp > 1);
#   the schedule (pp > 1): gpipe, 1f1b, zb, or interleaved(v: 2) where the layers are at least 2 pp (virtual
#     stages balanced by the cost model where 2 pp does not divide them);
#   cp_mode ring or all2all (cp > 1; all2all where cp divides the heads and kv heads of a tp rank);
#   the ZeRO stage (dp x cp > 1), and with a stage of 1-3 offload (`zero N offload`; on the CUDA target the
#     optimizer step in host memory, a no-op with a note on the CPU target);
#   recompute none, selective or full;
# on TARGET (cpu or cuda: the sample's, the CUDA one run on the emulated device); writes D/l2_K.model,
# D/l2_K.args (shardc build's) and D/l2_K.plan (a line) for K = 0.. and prints how many (shardc refuses what
# it does not take: the caller tries the next)
layouts() {
  python3 - "$@" <<'PY'
import itertools, random, re, sys
d, seed, target, first = sys.argv[1], int(sys.argv[2]), sys.argv[3], tuple(int(x) for x in sys.argv[4:8])
src = open(d + "/ref.model").read()
args = open(d + "/ref.args").read().split("\n")
defs = dict(args[i + 1].split("=", 1) for i in range(len(args) - 1) if args[i] == "-D")
const = {k: int(v) for k, v in re.findall(r"(\w+) = (\d+)", re.search(r"const (.*)", src).group(1))}
const.update((k, int(v)) for k, v in defs.items() if k in const)
B = int(defs["batch"])
rng = random.Random(seed * 7919 + 17)
rng2 = random.Random(seed * 7919 + 29)  # (the draws added later: the layouts drawn before them stay)
out = []
for dp, tp, pp, cp in itertools.product((1, 2, 4), repeat=4):
    if dp * tp * pp * cp not in (2, 4) or (dp, tp, pp, cp) == first:
        continue
    if const["heads"] % tp or const["kv_heads"] % tp or const["seq"] % (2 * cp) or const["layers"] < pp:
        continue
    ms = [m for m in ((pp, 2 * pp) if pp > 1 else (1, 2)) if B % (dp * m) == 0]
    if not ms:
        continue
    m = rng.choice(ms)
    L = const["layers"]
    sp = rng.choice(("on", "off")) if tp > 1 else None
    sched = rng.choice(("gpipe", "1f1b", "zb")) if pp > 1 else None
    if sched and L >= 2 * pp and rng2.random() < 0.4:
        sched = "interleaved"
    chunks = 2 * pp if sched == "interleaved" else pp
    blk = ["dp %d" % dp, "tp %d" % tp, "cp %d" % cp, "pp %d%s" % (pp, " layers(balanced)" if L % chunks else "")]
    if sp:
        blk.append("sp %s" % sp)
    if sched:
        blk.append("schedule %s" % ("interleaved(v: 2)" if sched == "interleaved" else sched))
    if cp > 1 and const["heads"] % (cp * tp) == 0 and const["kv_heads"] % (cp * tp) == 0 and rng2.random() < 0.5:
        blk.append("cp_mode all2all")
    if dp * cp > 1:
        z = rng.choice((0, 1, 2, 3))
        blk.append("zero %d%s" % (z, " offload" if z and rng2.random() < 0.4 else ""))
    blk.append("recompute %s" % rng.choice(("none", "none", "selective", "full")))
    out.append((dp * tp * pp * cp, blk, B // (dp * m)))
rng.shuffle(out)
for k, (world, blk, mb) in enumerate(out):
    with open("%s/l2_%d.model" % (d, k), "w") as f:
        f.write(src.replace("parallel {\n}", "parallel {\n  " + "\n  ".join(blk) + "\n}"))
    with open("%s/l2_%d.args" % (d, k), "w") as f:
        for key, v in defs.items():
            f.write("-D\n%s=%s\n" % (key, mb if key == "micro_batch" else v))
        if target == "cuda":
            f.write("--target\ncuda\n")
        f.write("--world\n%d\n" % world)
    with open("%s/l2_%d.plan" % (d, k), "w") as f:
        f.write("%s, micro_batch %d\n" % (", ".join(blk), mb))
print(len(out))
PY
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
# mpn NP ARGS..: ARGS under mpirun on NP ranks (the watchdog at 30 s, 300 s in all; SHARDRT_FAULT_SIGNAL passed
# on where it is set)
mpn() {
  local np=$1
  shift
  # shellcheck disable=SC2086 # (two words or none)
  env SHARDRT_TIMEOUT=30 timeout 300 mpirun --mca pml ob1 -np "$np" -x SHARDRT_TIMEOUT \
    ${SHARDRT_FAULT_SIGNAL:+-x SHARDRT_FAULT_SIGNAL} "$@"
}
# steps LOG: LOG's step lines without their timings (and the validation loss's)
steps() { grep '"loss"' "$1" | sed 's/,"ms":.*//'; }
# The checks of a fraction of the samples, run by check after its own (they read its locals):
# stop_check STEP RANK: a graceful stop (runtime/train/stop.c): the layout's run of the uninterrupted one's
# arguments with SIGTERM raised in rank RANK alone before step STEP (SHARDRT_FAULT_SIGNAL): every rank stops
# after that step (a rank that went on would hang the others' collectives into the watchdog), with status 75,
# that step's checkpoint committed (the checkpoint folder holds the steps' up to it, nothing else), rank 0's
# "stopped" line; --resume auto then ends with the uninterrupted run's step lines (losses, lr, grad norms),
# validation loss and step-3 checkpoint, bit for bit. A signal before the last step (3) ends the run normally:
# status 0, the same lines and checkpoints.
stop_check() {
  local k=$1 rk=$2 rc=0 want
  echo "stop at step $k (rank $rk)" >>"$d/extra"
  SHARDRT_FAULT_SIGNAL=$k:$rk "${mp[@]}" "${run[@]}" --steps 3 --log "$d/s.jsonl" --save-to "$d/cks" --ckpt-every 2 \
    --keep 0 --ckpt-format "$fmt" >"$d/s.log" 2>&1 || rc=$?
  if [ "$k" -lt 3 ]; then
    [ "$rc" = 75 ] || { echo "SIGTERM to rank $rk before step $k: status $rc, want 75 $(mpfail "" "$d/s.log")"; return; }
    want=$(printf 'step_%08d' "$k")
    [ "$(ls "$d/cks")" = "$want" ] ||
      { echo "SIGTERM to rank $rk before step $k: the checkpoints are $(ls "$d/cks" | tr '\n' ' '), want $want"; return; }
    grep -q "^stopped on .* after step $k of 3: checkpoint $d/cks/step_0000000$k saved; exit status 75" "$d/s.log" ||
      { echo "SIGTERM to rank $rk before step $k: no 'stopped on' line"; return; }
    "${mp[@]}" "${run[@]}" --steps 3 --log "$d/s.jsonl" --save-to "$d/cks" --ckpt-every 2 --keep 0 --ckpt-format "$fmt" \
      --resume auto >"$d/s2.log" 2>&1 || { mpfail "resumed after the stop at step $k" "$d/s2.log"; return; }
  else
    [ "$rc" = 0 ] || { echo "SIGTERM to rank $rk before the last step: status $rc, want 0 $(mpfail "" "$d/s.log")"; return; }
  fi
  [ "$(steps "$d/p.jsonl")" = "$(steps "$d/s.jsonl")" ] && [ "$(grep val_loss "$d/p.jsonl")" = "$(grep val_loss "$d/s.jsonl")" ] ||
    echo "stopped at step $k (rank $rk) and resumed: the steps or the validation loss logged otherwise than uninterrupted"
  same_ckpt "$d/ckp/$c3" "$d/cks/$c3" ||
    echo "stopped at step $k (rank $rk) and resumed: the step-3 checkpoint differs from the uninterrupted one's"
}
# sample_check: --sample 16 at temperature 0.1 from the layout's step-3 state, by the layout at the end of its
# resume from its own step 2 (pq: check gives it --sample; its step-3 checkpoint is the uninterrupted one's, bit
# for bit, checked above; sampling after training, where a logits entry reading bytes the step gave away would
# show) and by the single-rank program resumed from the layout's step-3 checkpoint (nothing left to train; its
# sampling state the checkpoint's, the one pq loaded with step 2): the same tokens. A draw differs with the
# total-variation distance of the two softmaxes, at most ~max |dlogit| / T. In f32 the logits of the same
# weights differ by round-off (~1e-7): ~1e-6 a token. In the CPU target's bf16 too: its GEMMs round both f32
# operands to bf16 (docs/training.md, "precision bf16 on the CPU target"), the same weights to the same bf16,
# an activation to another bf16 only where its f32 round-off straddles a rounding boundary (~2^8 x 1e-7 =
# 3e-5 of the elements, each then one bf16 ulp off). Not the CUDA target's bf16 (check draws none there): its
# activations bf16 end to end against the single rank's f32 (the emulated device's losses 3.5e-4 off). T 0.1,
# not the default 0.8, for a draw that sees small errors: the single rank's step-2 weights against the layout's
# step 3 drew other tokens on 5 of 6 seeds at 0.1, the same on 20700029 at 0.8.
sample_check() {
  echo "sample" >>"$d/extra"
  timeout 180 "$d/r" "${run[@]}" --resume "$d/ckp/$c3" --save-to '' "${sample[@]}" >"$d/sr.out" 2>"$d/sr.err" ||
    { echo "the single-rank trainer sampling from the $world-rank $fmt step 3 failed: $(grep -m1 error "$d/sr.err")"; return; }
  local a b
  a=$(sed -n '/^sample (/,$p' "$d/pq.log")
  b=$(sed -n '/^sample (/,$p' "$d/sr.out")
  if [ -z "$b" ] || [ "$(wc -l <<<"$b")" -lt 2 ]; then echo "the single rank printed no sample"; return; fi
  [ "$a" = "$b" ] || echo "--sample 16 from the $world-rank $fmt step 3: the layout's tokens differ from the single rank's"
}
# relayout_check: the layout's step 2 resumed for step 3 under another layout of the same model and recipe (the
# first of `layouts` that shardc builds, on the sample's target; none: said, not a failure), against the single
# rank's step 3 and validation loss within the tolerance (both states within it of the single rank's, as above)
relayout_check() {
  local deg n k=0 w2
  deg=$("$shardc" plan "$d/plan.model" "${pargs[@]}" 2>/dev/null | grep -m1 '^  plan:' |
    sed -E 's/.* dp ([0-9]+) tp ([0-9]+) pp ([0-9]+) cp ([0-9]+).*/\1 \2 \3 \4/')
  # shellcheck disable=SC2086 # (4 words)
  n=$(layouts "$d" "$s" "$target" $deg)
  while [ "$k" -lt "$n" ] && [ "$k" -lt 6 ]; do
    mapfile -t l2args <"$d/l2_$k.args"
    "$shardc" build "$d/l2_$k.model" "${l2args[@]}" -o "$d/l2" >"$d/l2_$k.log" 2>&1 && break
    k=$((k + 1))
  done
  if [ "$k" -ge "$n" ] || [ "$k" -ge 6 ]; then echo "relayout: none of $n built" >>"$d/extra"; return; fi
  w2=$(tail -1 "$d/l2_$k.args")
  echo "relayout to $w2 ranks${dev[*]:+ (cuda)}: $(cat "$d/l2_$k.plan")" >>"$d/extra"
  mpn "$w2" "${dev[@]}" "$d/l2" "${run[@]}" --resume "$d/ckp/$c2" --save-to '' --log "$d/l2.jsonl" >"$d/l2.log" 2>&1 ||
    { echo "the $fmt step 2 resumed under another layout ($(cat "$d/l2_$k.plan")) failed: $(grep -m1 -i 'watchdog\|error' "$d/l2.log" | cut -c1-160)"; return; }
  close "$d/r.jsonl" "$d/l2.jsonl" "$tol" "the $fmt step 2 resumed under another layout ($(cat "$d/l2_$k.plan"))"
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
  # (a resume that must not write into the checkpoints it reads says --save-to '': one without --save-to saves
  # into the root it resumed from, pruning and overwriting there)
  run=(--data "$d/data.bin" --eval-every 0 --val-batches 1 --threads 1)
  mp=(mpn "$world" "${dev[@]}" "$d/p")
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
  timeout 180 "$d/r" "${run[@]}" --resume "$d/ckp/$c2" --save-to '' --log "$d/rp.jsonl" >"$d/rp.log" 2>&1 ||
    { echo "the single-rank trainer resumed from the $world-rank $fmt step 2 failed: $(grep -m1 error "$d/rp.log")"; return; }
  close "$d/r.jsonl" "$d/rp.jsonl" "$tol" "the single rank resumed from the $world-rank $fmt step 2"
  "${mp[@]}" "${run[@]}" --resume "$d/ckr/$c2" --save-to '' --log "$d/pr.jsonl" >"$d/pr.log" 2>&1 ||
    { mpfail "resumed from the single rank's step 2" "$d/pr.log"; return; }
  close "$d/r.jsonl" "$d/pr.jsonl" "$tol" "the $world ranks resumed from the single rank's step 2"
  # the checks of a third of the samples each, drawn from the seed (DIR/extra names them for the sample's line)
  local h=$((s * 2654435761 % 1000003)) sample=()
  [ $((h / 27 % 3)) = 0 ] && ! { [ "$target" = cuda ] && [ "$prec" = bf16 ]; } && sample=(--sample 16 --temperature 0.1)
  "${mp[@]}" "${run[@]}" --resume "$d/ckp/$c2" --log "$d/pq.jsonl" --save-to "$d/ckq" --ckpt-format "$fmt" \
    "${sample[@]}" >"$d/pq.log" 2>"$d/pq.err" || { mpfail "resumed from its own $fmt step 2" "$d/pq.err"; return; }
  [ "$(line3 "$d/p.jsonl")" = "$(line3 "$d/pq.jsonl")" ] ||
    echo "the $world ranks resumed from their own $fmt step 2: step 3 logged otherwise than uninterrupted"
  same_ckpt "$d/ckp/$c3" "$d/ckq/$c3" ||
    echo "the $world ranks resumed from their own $fmt step 2: the step-3 checkpoint differs from the uninterrupted one's"
  : >"$d/extra"
  [ $((h % 3)) = 0 ] && stop_check $((1 + h / 3 % 3)) $((h / 9 % world))
  [ ${#sample[@]} -gt 0 ] && sample_check
  [ $((h / 81 % 3)) = 0 ] && relayout_check
  return 0
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
    extra=$(paste -sd';' "$d/extra" 2>/dev/null | sed 's/;/; /g')
    if [ -n "$why" ]; then
      failed=$((failed + 1))
      rm -rf "${out:?}/$s" && cp -r "$d" "$out/$s"
      echo "FAIL seed $s ($desc${extra:+; $extra}): $(tr '\n' ' ' <<<"$why"); kept in $out/$s"
    else
      echo "ok   seed $s ($desc; worst |rel| $(sort -g "$d/worst" | tail -1)${extra:+; $extra})"
    fi
  done
done
echo "fuzz_runs: $ran samples run from seed $from in $(($(date +%s) - start)) s, $failed failed"
[ "$failed" -eq 0 ]
