#!/usr/bin/env bash
# Issue 19's first "Done when", in one test (label mpi): dp=2 x tp=2 (4 ranks), pp=2 and dp=2 x
# zero 3 (2 ranks each) write sharded checkpoints that resume bit-identically in their own layout
# and within 1e-5 on 1, 2 and 4 ranks of other layouts, with no rank ever holding more than its
# own shards plus one piece in flight (memory measured).
# The tiny GPT widened to d=256, 4 layers (3.2 M parameters: 12.6 MiB of f32 weights, 37.9 MiB with
# the AdamW moments), global batch 4 everywhere (pp=2 and one rank through accumulation).
# Per layout, each rank under /usr/bin/time (its peak resident size, VmHWM):
#   base   steps 1..4 uninterrupted, no checkpoint
#   save   steps 1..2 and a sharded checkpoint at step 2
#   load   --resume of that checkpoint, steps 3..4, no checkpoint: losses 3 and 4 bit-identical to
#          base's (step 3's loss checks the weights, step 4's the optimizer state and the data
#          position: after 2 updates both have moved far beyond the tolerance)
# Memory, per rank: what the save adds to its peak (save - base) is at most the bytes it writes
# (its rank_R.safetensors: its own blocks, less what another dp replica writes) plus the largest
# piece of the checkpoint (the one packed piece in flight) plus SLACK; what the load adds (load -
# base), the largest piece plus SLACK (pieces are read with pread straight into the rank's
# tensors). The whole state is 37.9 MiB, so a save or load that materialised the model fails here,
# as the negative control shows: the dp=2 x tp=2 save with --ckpt-format logical (every tensor
# gathered whole on every rank) must exceed the bound (the measurement tells them apart).
# SLACK: the writer thread's stack and its allocator arena, the index and the file headers (under
# 1 MiB measured here; 4 MiB leaves room while staying far below the state).
# The same step in two formats: dp=2 x tp=2's sharded step 2 turned into a single file by the
# 1-rank trainer without a corpus (--data '') is byte for byte the logical save of the same step
# (tensor names, order, data and metadata: a 1-rank trainer that accumulates names its layers as
# every other plan does).
# shardc ckpt convert (on files only) writes each layout's sharded step 2 as a single file — dp=2 x
# tp=2's byte for byte the logical save — adding at most twice the largest tensor to its peak; the
# single files resume on 1 rank (zero 3's) and 4 ranks (pp=2's on dp=2 x tp=2) within 1e-5; zero 3's
# converted back to a sharded checkpoint converts again to the same files and resumes on 1 rank
# bit-identically with zero 3's own.
# Across layouts: pp=2's and zero 3's step-2 checkpoints resumed on 4 ranks (dp=2 x tp=2), 2 ranks
# (each other's layout) and 1 rank give steps 3 and 4 within 1e-5 of the writing layout's
# uninterrupted run (tests/codegen/layouts.sh justifies the tolerance, and resumes dp=2 x tp=2's
# under dp=4, tp=2, dp=2 and on one rank).
# Time: the trainers' start (mpirun, the fabric, initialisation) dominates each run on the loaded 2
# cores, so each run is as short as its check allows (4 steps), the 1-rank runs go without mpirun,
# no run measures the peak FLOP/s (SHARDRT_PEAK_FLOPS: MFU is not checked here), the four trainers
# are built at once, and independent runs go two at a time (a 2-rank start leaves a core mostly
# idle; each run's peak resident size is its own processes', whatever runs beside it): dp=2 x tp=2's
# runs beside pp=2's and then zero 3's, and the resumes of the converted and cross-layout
# checkpoints in pairs. Every check reads the runs' files afterwards, in a fixed order.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh
[ -x /usr/bin/time ] || fail "/usr/bin/time is missing (scripts/setup.sh installs it: package 'time')"
export SHARDRT_PEAK_FLOPS=1e11
slack=$((4 << 20))
m=(models/tiny.model -D d=256 -D layers=4 -D heads=4 -D seq=32 -D micro_batch=2 -D batch=4)
# both NAME CMD... (background) and done_all: CMD's output in $t/NAME.out, at most two at once;
# done_all waits for every one and fails the test, after all have ended, if any failed (bash keeps
# each one's status for `wait PID`, also after `wait -n` took it)
pids=()
both() {
  local n=$1
  shift
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n || true; done
  ( "$@" >"$t/$n.out" 2>&1 || { echo "FAIL: $n (status $?):"; cat "$t/$n.out"; exit 1; } ) &
  pids+=($!)
}
done_all() {
  local p bad=0
  for p in "${pids[@]}"; do wait "$p" || bad=1; done
  pids=()
  [ $bad = 0 ]
}
build() {
  local o=$1
  shift
  "$shardc" build "${m[@]}" "$@" -o "$t/$o"
}
both build_dp2tp2 build dp2tp2 -D dp=2 -D tp=2 --world 4
both build_pp2 build pp2 -D dp=1 -D pp=2 --world 2
both build_z3 build z3 -D dp=2 -D zero=3 --world 2
both build_one build one --world 1
done_all
declare -A np=([dp2tp2]=4 [pp2]=2 [z3]=2 [one]=1)
w=(--data "$t/data.txt" --eval-every 0 --val-batches 1 --threads 1 --steps 4)
# timed NAME LAYOUT FLAGS...: LAYOUT's trainer on its ranks, each under /usr/bin/time; $t/NAME.R holds rank R's peak (KiB)
timed() {
  local name=$1 l=$2
  shift 2
  "${mpi[@]}" -np "${np[$l]}" bash -c 'exec /usr/bin/time -f %M -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' "$t/$name" \
    "$t/$l" "${w[@]}" "$@" >"$t/$name.out" 2>&1 || { cat "$t/$name.out"; fail "$name"; }
}
# on LAYOUT FLAGS...: LAYOUT's trainer on its ranks (the 1-rank one without mpirun)
on() {
  local l=$1
  shift
  if [ "${np[$l]}" = 1 ]; then "$t/$l" "${w[@]}" "$@"; else "${mpi[@]}" -np "${np[$l]}" "$t/$l" "${w[@]}" "$@"; fi
}
peak() { echo $(($(tail -1 "$t/$1.$2") * 1024)); }
largest_piece() { grep -aho '"data_offsets":\[[0-9]*,[0-9]*\]' "$1"/rank_*.safetensors | tr -dc '0-9,\n' | awk -F, '{ if ($2 - $1 > m) m = $2 - $1 } END { print m + 0 }'; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
# close NAME LOG REF: steps 3 and 4 of LOG (2 steps) within 1e-5 relative of REF's (4 steps)
close() {
  paste <(losses "$3" | tail -n +3) <(losses "$2") | awk -v n="$1" '{ k++; d = $2 - $1; if (d < 0) d = -d; r = d / $1; if (r > w) w = r; if (r > 1e-5) bad++ }
    END { printf "%-34s steps 3..4 vs uninterrupted: worst |rel| %.1e\n", n, w; exit (k == 2 && !bad ? 0 : 1) }'
}
ck2() { echo "$t/ck_$1/step_00000002"; }
# runs LAYOUT: its base, save and load runs
runs() {
  local l=$1 ck
  ck=$(ck2 "$l")
  timed "$l.base" "$l" --save-to '' --log "$t/$l.jsonl"
  timed "$l.save" "$l" --stop-at 2 --save-to "$t/ck_$l"
  [ -f "$ck/index.json" ] && [ -f "$ck/rank_0000$((np[$l] - 1)).safetensors" ] || { ls -A "$t/ck_$l"; fail "$l wrote no sharded checkpoint"; }
  timed "$l.load" "$l" --resume "$ck" --save-to '' --log "$t/$l.r.jsonl"
}
# dp=2 x tp=2's runs (and the negative control below: a logical save) beside pp=2's, then zero 3's
runs_dp2tp2() {
  runs dp2tp2
  timed dp2tp2.logical dp2tp2 --stop-at 2 --save-to "$t/ck_logical" --ckpt-format logical
}
runs_pp2_z3() {
  runs pp2
  runs z3
}
both runs_dp2tp2 runs_dp2tp2
both runs_pp2_z3 runs_pp2_z3
done_all
for l in dp2tp2 pp2 z3; do
  ck=$(ck2 "$l")
  [ "$(losses "$t/$l.jsonl" | tail -n 2)" = "$(losses "$t/$l.r.jsonl")" ] && [ "$(losses "$t/$l.r.jsonl" | wc -l)" = 2 ] ||
    { paste <(losses "$t/$l.jsonl") <(losses "$t/$l.r.jsonl"); fail "$l: resumed in its own layout, steps 3..4 differ"; }
  echo "$l: step 2 resumed in its own layout: losses 3..4 bit-identical"
  whole=$(cat "$ck"/rank_*.safetensors | wc -c)
  piece=$(largest_piece "$ck")
  for r in $(seq 0 $((np[$l] - 1))); do
    own=$(stat -c %s "$ck/rank_$(printf %05d "$r").safetensors")
    base=$(peak "$l.base" "$r")
    rs=$(($(peak "$l.save" "$r") - base)) rl=$(($(peak "$l.load" "$r") - base))
    bs=$((own + piece + slack)) bl=$((piece + slack))
    echo "$l rank $r: save +$(mib $rs) MiB (bound: its file $(mib "$own") + largest piece $(mib "$piece") + slack $(mib $slack)), load +$(mib $rl) MiB (bound $(mib $bl)); the whole state $(mib "$whole") MiB, base peak $(mib "$base") MiB"
    [ $rs -le $bs ] || fail "$l rank $r: the save added $(mib $rs) MiB, more than its own shards plus one piece ($(mib $bs) MiB)"
    [ $rl -le $bl ] || fail "$l rank $r: the load added $(mib $rl) MiB, more than one piece ($(mib $bl) MiB)"
  done
done
# the negative control: a logical save gathers every tensor on every rank (run above)
ck=$(ck2 dp2tp2)
piece=$(largest_piece "$ck")
for r in 0 1 2 3; do
  own=$(stat -c %s "$ck/rank_$(printf %05d "$r").safetensors")
  rs=$(($(peak dp2tp2.logical "$r") - $(peak dp2tp2.base "$r")))
  echo "dp2tp2 rank $r, --ckpt-format logical: save +$(mib $rs) MiB (the sharded bound $(mib $((own + piece + slack))) MiB)"
  [ $rs -gt $((own + piece + slack)) ] || fail "the logical save's gather (rank $r, +$(mib $rs) MiB) is not told apart from a sharded save"
done
# the same step in two formats: the conversion of the sharded step 2 without the corpus (--data '')
# is the logical save's files, byte for byte (run beside the conversions below)
both hf "$t/one" --data '' --resume "$ck" --stop-at 2 --save-to "$t/hf"
# shardc ckpt convert, on files only: each layout's sharded step 2 as a single file, dp=2 x tp=2's
# byte for byte its logical save; memory: what the conversion adds to the peak of `shardc ckpt info`
# of the same checkpoint (which reads the index only) is at most twice the largest tensor plus SLACK
# (one tensor assembled at a time, a per-layer one from a second buffer), far below the whole state
for l in dp2tp2 pp2 z3; do
  /usr/bin/time -f %M -o "$t/conv_$l.kib" "$shardc" ckpt convert "$(ck2 "$l")" "$t/single_$l" >/dev/null
  /usr/bin/time -f %M -o "$t/info_$l.kib" "$shardc" ckpt info "$(ck2 "$l")" >/dev/null
done
"$shardc" ckpt convert "$t/single_z3" "$t/back_z3" --format sharded >/dev/null
"$shardc" ckpt convert "$t/back_z3" "$t/single_z3b" >/dev/null
# the resumes, two at a time: the single files on 1 rank and on another layout's ranks; zero 3's
# converted back (--format sharded); each layout's step 2 across layouts, on 4, 2 and 1 rank(s)
# (dp=2 x tp=2 in tests/codegen/layouts.sh)
both s_z3.one on one --resume "$t/single_z3" --save-to '' --log "$t/s_z3.one.jsonl"
both s_pp2.dp2tp2 on dp2tp2 --resume "$t/single_pp2" --save-to '' --log "$t/s_pp2.dp2tp2.jsonl"
both b_z3.one on one --resume "$t/back_z3" --save-to '' --log "$t/b_z3.one.jsonl"
cross=(pp2:dp2tp2 pp2:z3 pp2:one z3:dp2tp2 z3:pp2 z3:one)
for c in "${cross[@]}"; do
  from=${c%%:*} to=${c#*:}
  both "x_$from.$to" on "$to" --resume "$(ck2 "$from")" --save-to '' --log "$t/x_$from.$to.jsonl"
done
done_all
same_ckpt "$t/hf/step_00000002" "$(ck2 logical)" ||
  { ls -l "$t/hf/step_00000002" "$(ck2 logical)"; fail "dp2 x tp2's step 2: its 1-rank conversion and its logical save differ"; }
echo "dp2tp2 step 2: the 1-rank conversion of the sharded checkpoint = the logical save, byte for byte"
for l in dp2tp2 pp2 z3; do
  big=$(grep -o '"dtype":"F32","shape":\[[0-9,]*\]' "$(ck2 "$l")/index.json" | grep -o '\[.*\]' | tr -d '[]' |
    awk -F, '{ n = 4; for (i = 1; i <= NF; i++) n *= $i; if (n > m) m = n } END { print m }')
  add=$((($(tail -1 "$t/conv_$l.kib") - $(tail -1 "$t/info_$l.kib")) * 1024))
  echo "shardc ckpt convert $l: +$(mib $add) MiB over ckpt info (bound: 2 x the largest tensor $(mib "$big") + slack $(mib $slack))"
  [ $add -le $((2 * big + slack)) ] || fail "the conversion of $l held more than a tensor at a time"
done
same_ckpt "$t/single_dp2tp2" "$(ck2 logical)" || fail "shardc ckpt convert of dp2 x tp2's step 2 differs from its logical save"
echo "dp2tp2 step 2: shardc ckpt convert = the logical save, byte for byte"
# the single files resumed within 1e-5; converted back they are the same files again, and resume on
# 1 rank bit-identically with zero 3's own checkpoint
close "z3 step 2 -> single -> one (1)" "$t/s_z3.one.jsonl" "$t/z3.jsonl" || fail "z3's single file resumed on one rank"
close "pp2 step 2 -> single -> dp2tp2 (4)" "$t/s_pp2.dp2tp2.jsonl" "$t/pp2.jsonl" || fail "pp2's single file resumed on dp2 x tp2"
same_ckpt "$t/single_z3" "$t/single_z3b" || fail "z3: single -> sharded -> single changed the files"
for c in "${cross[@]}"; do
  from=${c%%:*} to=${c#*:}
  close "$from step 2 -> $to (${np[$to]} rank(s))" "$t/x_$from.$to.jsonl" "$t/$from.jsonl" ||
    fail "$from's checkpoint resumed under $to"
done
[ "$(losses "$t/b_z3.one.jsonl")" = "$(losses "$t/x_z3.one.jsonl")" ] ||
  fail "z3 converted to a single file and back resumes differently from z3's own checkpoint"
echo "z3: single -> sharded -> single byte for byte; the converted-back checkpoint resumes as z3's own on one rank"
rc=0
"$t/one" --data '' --steps 4 --save-to '' >"$t/nodata.out" 2>&1 || rc=$?
[ $rc = 1 ] && grep -q "error: no training data: pass --data" "$t/nodata.out" || { cat "$t/nodata.out"; fail "--data '' with steps to train (status $rc)"; }
echo "ckpt_sharded: dp2 x tp2, pp2 and zero 3: bit-identical in their layouts, within 1e-5 across layouts, each rank its own shards plus one piece"
