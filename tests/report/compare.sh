#!/usr/bin/env bash
# tests/report/compare.sh — `shardc plan --compare` and `--storage` (passes/plan_compare.c,
# passes/storage.c; docs/planner.md), numbers against hand-computed ones on tiny (120,576 f32
# parameters, AdamW: a checkpoint is 3 x 4 x 120,576 = 1,446,912 bytes):
#  1. --compare "zero=0,1,2,3" (dp 2 on the 2-rank CPU topology): parameters 471 KiB under ZeRO 0-2
#     and fewer under 3; optimizer state 942 KiB at ZeRO 0 and 471 KiB from 1 on; traffic in node
#     471 KiB (the gradients' all-reduce, 2(N-1)/N = 1 x 482,312 B) at 0 and 706.5 KiB at 1 (plus
#     the updated parameters' all-gather, 1/2 x 482,304 B); checkpoint 1.38 MiB in every column,
#     written by both ranks in 145 us at 10 GB/s; each column's step is `--cost`'s for its plan;
#  2. several knobs: every combination, the last knob fastest; a model file beside the command
#     line's; a variant the compiler refuses is a "refused" column with its message;
#  3. --storage on tp 2: rank 1 writes its halves of the split tensors (99,200 split parameters +
#     16,384 of the vocab-parallel wte: (49,600 + 8,192) x 12 = 693,504 B), rank 0 those and the
#     4,992 replicated ones (753,408 B); across nodes (GPT-2 on 4 p4d nodes) a node's network
#     carries one ring edge of each group: dp 32 (8 members per node) a rank's bytes, dp 4 x tp 8
#     (1 member per node) 8 x a rank's bytes;
#  3b. --sbatch: its warning before the time limit from the plan's step and checkpoint (storage_stop_warning_s);
#  4. bad input: an empty value, knobs and files mixed, --storage 0, --compare with --search;
#  5. the SVGs are well-formed XML and show these numbers (tests/report/svg_check.py): the mesh of
#     GPT-2 tp 8 x dp 4 on 4 p4d nodes, tiny's memory bars, the comparison chart's steps;
#  6. with `trainer` (label mpi): the tp 2 trainer's checkpoint files hold exactly the predicted
#     payload bytes per rank (each safetensors file less its header).
# Usage: tests/report/compare.sh SHARDC [trainer]
set -uo pipefail
shardc=${1:?usage: compare.sh SHARDC [trainer]}
mode=${2:-}
source "$(dirname "$0")/lib.sh"

# cell ROW COL: the table's cell (columns of 16 characters after a 28-character row name)
cell() { awk -v row="$1" -v col="$2" 'substr($0, 1, 28) ~ "^#   " row " *$" {
  s = substr($0, 29 + 16 * (col - 1), 16); gsub(/^ +| +$/, "", s); print s; exit }'; }
expect() { # expect OUTPUT ROW COL WANT
  local got
  got=$(echo "$1" | cell "$2" "$3")
  [ "$got" = "$4" ] || bad "$2, column $3: '$got', want '$4'"
}

if [ "$mode" = trainer ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  "$shardc" build models/tiny.model -D tp=2 -D dp=1 -D seq=32 -o "$tmp/tp2" >/dev/null 2>&1 || { echo "FAIL: build"; exit 1; }
  pred=$("$shardc" plan models/tiny.model -D tp=2 -D dp=1 -D seq=32 --storage 1 2>&1 |
    sed -n 's/.*per writing rank .* (\([0-9]*\) B) to .* (\([0-9]*\) B, rank \([0-9]*\)).*/\1 \2 \3/p')
  head -c 20000 README.md >"$tmp/data.txt"
  (cd "$tmp" && timeout 120 mpirun --mca pml ob1 -np 2 ./tp2 --data data.txt --steps 1 --ckpt-every 1 --threads 1 \
    --eval-every 0 --val-batches 1 --save-to ck >run.out 2>&1) || { cat "$tmp/run.out"; echo "FAIL: the trainer"; exit 1; }
  got=$(python3 - "$tmp"/ck/step_*/rank_*.safetensors <<'EOF'
import struct, sys
sizes = []
for f in sorted(sys.argv[1:]):
    b = open(f, 'rb').read()
    sizes.append(len(b) - 8 - struct.unpack('<Q', b[:8])[0])
print(min(sizes), max(sizes), sizes.index(max(sizes)))
EOF
)
  [ -n "$pred" ] && [ "$pred" = "$got" ] || bad "checkpoint payload per rank (min max rank-of-max): predicted '$pred', written '$got'"
  [ $fail = 0 ] && echo "ok: the trainer's checkpoint files hold the predicted bytes ($got)"
  exit $fail
fi

# 1. zero 0..3
out=$("$shardc" plan models/tiny.model --compare "zero=0,1,2,3" 2>&1) || bad "compare zero: $out"
hdr=$(echo "$out" | sed -n 2p | tr -s ' ')
[ "$hdr" = "# zero=0 zero=1 zero=2 zero=3" ] || bad "header: '$hdr'"
for c in 1 2 3 4; do
  expect "$out" "mesh dp.pp.cp.tp" $c "2.1.1.1"
  expect "$out" "checkpoint size" $c "1.38 MiB"
  expect "$out" "checkpoint writers" $c "2"
  expect "$out" "checkpoint write, all" $c "145 us"
  step=$("$shardc" plan models/tiny.model -D zero=$((c - 1)) --cost 2>&1 | sed -n 's/^#   step  *\([0-9.e+]* [mu]*s\) .*/\1/p')
  expect "$out" "step" $c "$step"
done
# 1b. a zb column is the plan `shardc plan` makes: its lists made with the cost model's times (tiny, 8
# layers, pp 4 x 8 micro-batches: 3.3 ms of bubble; with the equal-time lists, which --compare made
# before, 5.03 ms), its bubble and step `--cost`'s
zb=(models/tiny.model -D layers=8 -D micro_batch=1 -D batch=8 -D dp=1 -D pp=4 --world 4)
zout=$("$shardc" plan "${zb[@]}" --compare "schedule=1f1b,zb" 2>&1)
zcost=$("$shardc" plan "${zb[@]}" -D schedule=zb --cost 2>&1)
zbub=$(echo "$zcost" | sed -n 's/^#   pipeline bubble  *\([0-9.e+]* [mu]*s\) .*/\1/p')
zstep=$(echo "$zcost" | sed -n 's/^#   step  *\([0-9.e+]* [mu]*s\) .*/\1/p')
[ -n "$zbub" ] && [ "$zbub" != "5.03 ms" ] || bad "zb --cost bubble '$zbub' (5.03 ms: the equal-time lists)"
expect "$zout" "pipeline bubble" 2 "$zbub"
expect "$zout" "step" 2 "$zstep"
for c in 1 2 3; do expect "$out" "memory params" $c "471 KiB"; done
p3=$(echo "$out" | cell "memory params" 4)
case "$p3" in *KiB) awk -v p="${p3% KiB}" 'BEGIN { exit !(p < 471) }' || bad "ZeRO-3 parameters $p3, not under 471 KiB" ;;
  *) bad "ZeRO-3 parameters '$p3'" ;; esac
expect "$out" "memory optimizer" 1 "942 KiB"
for c in 2 3 4; do expect "$out" "memory optimizer" $c "471 KiB"; done
expect "$out" "traffic in node" 1 "471 KiB"
expect "$out" "traffic in node" 2 "706.5 KiB"
expect "$out" "traffic across nodes" 1 "0 B"

# 2. several knobs, files, a refused variant
out=$("$shardc" plan models/tiny.model --compare "zero=0,1 tp=1,2" 2>&1) || bad "two knobs: $out"
hdr=$(echo "$out" | sed -n 2p | sed 's/^# *//; s/   */|/g')
[ "$hdr" = "zero=0 tp=1|zero=0 tp=2|zero=1 tp=1|zero=1 tp=2" ] || bad "two knobs' columns: '$hdr'"
expect "$out" "mesh dp.pp.cp.tp" 2 "1.1.1.2"
expect "$out" "mesh dp.pp.cp.tp" 3 "2.1.1.1"
sed 's/micro_batch 8/micro_batch 4/' models/tiny.model >"$tmp/tiny4.model"
out=$("$shardc" plan models/tiny.model -I models --compare "$tmp/tiny4.model" 2>&1) || bad "files: $out"
hdr=$(echo "$out" | sed -n 2p | tr -s ' ')
[ "$hdr" = "# tiny.model tiny4.model" ] || bad "files' columns: '$hdr'"
a1=$(echo "$out" | cell "memory activations" 1) a2=$(echo "$out" | cell "memory activations" 2)
awk -v a="${a1% MiB}" -v b="${a2% MiB}" 'BEGIN { exit !(b < 0.6 * a) }' || bad "micro_batch 4's activations $a2, not under 0.6 x $a1"
out=$("$shardc" plan models/tiny.model --compare "tp=2,3" 2>&1) || bad "a refused variant failed the comparison: $out"
expect "$out" "step" 2 "refused"
echo "$out" | has "^# tp=3 refused: .*tp" || bad "no message for the refused tp=3: $out"

# 3. --storage
out=$("$shardc" plan models/tiny.model -D tp=2 -D dp=1 --storage 2 2>&1) || bad "storage: $out"
echo "$out" | has "size             1.4 MiB (1446912 B), 48 tensors" || bad "storage: checkpoint size: $out"
echo "$out" | has "per writing rank 677.2 KiB (693504 B) to 735.8 KiB (753408 B, rank 0)" || bad "storage: per rank: $out"
echo "$out" | has "all ranks write  723 us" || bad "storage: 1446912 B at 2 GB/s is 723 us: $out"
gpt=(models/gpt2-124m.model --target cuda --topology models/topo/p4d-x4.topo -D micro_batch=16 --storage 5)
net() { sed -n 's/^#   across nodes .* per rank (\([0-9]*\) B); a node.s network carries .* (\([0-9]*\) B):.*/\1 \2/p'; }
read -r r n <<<"$("$shardc" plan "${gpt[@]}" 2>&1 | net)"
[ -n "${r:-}" ] && [ "$r" = "$n" ] || bad "dp 32 on 4 nodes: a node's network carries '$n' B, want a rank's '$r' B"
read -r r n <<<"$("$shardc" plan "${gpt[@]}" -D tp=8 -D dp=4 2>&1 | net)"
[ -n "${r:-}" ] && [ "$((8 * r))" = "$n" ] || bad "dp 4 x tp 8: a node's network carries '$n' B, want 8 x a rank's '$r' B"

# 3b. --sbatch's warning before the time limit: twice the predicted step and the checkpoint's sharded writes, plus
# 30 s, at least 120 (passes/storage.c storage_stop_warning_s): tiny keeps 120; GPT-3 175B's 2 TB checkpoint at
# the default 10 GB/s needs minutes (120 s killed its writes: 486 s), 120 again at --storage 100 (21 s of writes)
warn() { # prints the script's --signal seconds and its comment's step and checkpoint seconds
  sed -n 's/^#SBATCH --signal=B:USR1@\([0-9]*\)$/\1/p' "$1"
  sed -n "s/^# Slurm's warning before the time limit: [0-9]* s, twice a step (\([0-9.]*\) \([a-z]*\) predicted) and a checkpoint's writes (\([0-9.]*\) \([a-z]*\) for .*/\1 \2 \3 \4/p" "$1"
}
"$shardc" plan models/tiny.model --sbatch "$tmp/tiny.sbatch" >/dev/null 2>&1 || bad "tiny --sbatch failed"
[ "$(warn "$tmp/tiny.sbatch" | head -1)" = 120 ] || bad "tiny's --signal: $(grep -- '--signal\|warning' "$tmp/tiny.sbatch")"
g3=(models/gpt3-175b.model --target cuda --topology models/topo/p4d-x128.topo -D tp=8 -D pp=16 -D dp=8 -D zero=1
  -D recompute=none -D schedule=zb)
for bw in "" 100; do
  "$shardc" plan "${g3[@]}" ${bw:+--storage $bw} --sbatch "$tmp/g3$bw.sbatch" >/dev/null 2>&1 || bad "GPT-3 --sbatch ${bw:+--storage $bw} failed"
  read -r sig <<<"$(warn "$tmp/g3$bw.sbatch" | head -1)"
  read -r st su ck cu <<<"$(warn "$tmp/g3$bw.sbatch" | tail -1)"
  awk -v sig="${sig:-0}" -v st="${st:-0}" -v su="$su" -v ck="${ck:-0}" -v cu="$cu" 'function s(v, u) { return u == "ms" ? v / 1e3 : u == "us" ? v / 1e6 : v }
    BEGIN { w = 2 * (s(st, su) + s(ck, cu)) + 30; if (w < 120) w = 120; exit !(sig >= w - 1 && sig <= w * 1.01 + 1) }' ||
    bad "GPT-3 --sbatch ${bw:+--storage $bw}: --signal $sig s, not 2 x (step $st $su + writes $ck $cu) + 30 (at least 120): $(grep "warning before" "$tmp/g3$bw.sbatch")"
  eval "sig_$bw=\$sig"
done
[ "${sig_:-0}" -gt 120 ] && [ "${sig_:-0}" -gt "${sig_100:-0}" ] || bad "GPT-3: the warning at 10 GB/s ($sig_ s) is not longer than at --storage 100 ($sig_100 s)"
echo "--sbatch warning: tiny 120 s, GPT-3 175B ${sig_} s (10 GB/s), ${sig_100} s (--storage 100)"

# 4. bad input
err=$("$shardc" plan models/tiny.model --compare "zero=" 2>&1) && bad "an empty value was accepted"
echo "$err" | has "error: --compare: 'zero=' has no values" || bad "empty value: $err"
# a knob given twice (each variant took the last value) and files past the 16th (dropped): refused
err=$("$shardc" plan models/tiny.model --compare "zero=0 zero=1" 2>&1) && bad "a knob given twice was accepted"
echo "$err" | has -F "error: --compare: 'zero' is given twice in 'zero=0 zero=1': list its values once" || bad "knob twice: $err"
err=$("$shardc" plan models/tiny.model --compare "$(printf 'f%d.model ' $(seq 16))" 2>&1) && bad "17 plans were accepted"
echo "$err" | has -F "error: --compare: 'f16.model': at most 16 plans side by side" || bad "17 plans: $err"
err=$("$shardc" plan models/tiny.model --compare "zero=0,1 b.model" 2>&1) && bad "knobs and files were accepted"
echo "$err" | has "either knobs" || bad "knobs and files: $err"
err=$("$shardc" plan models/tiny.model --storage 0 2>&1) && bad "--storage 0 was accepted"
echo "$err" | has "error: --storage needs a positive bandwidth in GB/s, got '0'" || bad "--storage 0: $err"
err=$("$shardc" plan models/tiny.model --compare "zero=0,1" --search 2>&1) && bad "--compare --search was accepted"
echo "$err" | has "one at a time" || bad "--compare --search: $err"
err=$("$shardc" build models/tiny.model --compare "zero=0,1" 2>&1) && bad "build --compare was accepted"
echo "$err" | has "builds nothing" || bad "build --compare: $err"
err=$("$shardc" plan models/tiny.model --search --storage 5 2>&1) && bad "--search --storage (no --pick) was accepted"
echo "$err" | has "concern one plan: add --pick" || bad "--search --storage: $err"
err=$("$shardc" plan models/tiny.model --search --sbatch "$tmp/x.sbatch" 2>&1) && bad "--search --sbatch (no --pick) was accepted"
echo "$err" | has "concern one plan: add --pick" || bad "--search --sbatch: $err"
err=$("$shardc" plan models/tiny.model --compare "zero=0,1" --sbatch "$tmp/x.sbatch" 2>&1) && bad "--compare --sbatch was accepted"
echo "$err" | has "without -o, --emit-c or --sbatch" || bad "--compare --sbatch: $err"

# 5. pictures
chk=tests/report/svg_check.py
"$shardc" plan "${gpt[@]}" -D tp=8 -D dp=4 --mesh-svg "$tmp/mesh.svg" >/dev/null 2>&1 || bad "--mesh-svg failed"
python3 $chk mesh "$tmp/mesh.svg" || bad "the mesh SVG"
"$shardc" plan models/tiny.model --memory-svg "$tmp/mem.svg" --bytes >"$tmp/plan.txt" 2>&1 || bad "--memory-svg failed"
python3 $chk memory "$tmp/mem.svg" "$tmp/plan.txt" || bad "the memory SVG"
"$shardc" plan models/tiny.model --compare "zero=0,1,2,3" --memory-svg "$tmp/cmem.svg" --compare-svg "$tmp/cmp.svg" \
  >"$tmp/cmp.txt" 2>&1 || bad "--compare-svg failed"
python3 $chk compare "$tmp/cmp.svg" "$tmp/cmp.txt" || bad "the comparison SVG"
python3 -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' "$tmp/cmem.svg" || bad "--compare --memory-svg: not XML"
err=$("$shardc" plan models/tiny.model --compare-svg "$tmp/x.svg" 2>&1) && bad "--compare-svg without --compare was accepted"
echo "$err" | has "give --compare SPEC too" || bad "--compare-svg alone: $err"
err=$("$shardc" plan models/tiny.model --mesh-svg /nonexistent/dir/m.svg 2>&1) && bad "an unwritable --mesh-svg was accepted"
echo "$err" | has "error: --mesh-svg: cannot write '/nonexistent/dir/m.svg'" || bad "unwritable --mesh-svg: $err"

[ $fail = 0 ] && echo "ok: plan --compare, --storage and the SVGs"
exit $fail
