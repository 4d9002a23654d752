#!/usr/bin/env bash
# The plan's `recompute` and `offload` (label passes): recompute is applied (no warning names it),
# its kinds are none, selective and full (anything else is an error with a hint); `offload` is a
# no-op with a note on the CPU target, applied on the CUDA target (the optimizer state leaves the
# device plan for the host one: the device total drops by exactly that state), and an error
# without a ZeRO stage; `weight_copy` decided against the device's memory, chosen by hand, refused where
# it cannot apply; `defer_waits` likewise (the deferred scatter waits taken off where only the plan
# without them fits). Usage: plan_options.sh SHARDC
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
set +e # every case runs: $status collects the failures
shardc=$(abspath "$1")
status=0
m=tests/passes/plan/offload.model
# (the memory table's needles below are its exact sizes: `shardc plan` runs with --bytes)
expect() { # expect WANT_EXIT "needle" ... -- shardc args: expect_shardc's checks, and no warning names recompute
  local a=("$@") i
  for ((i = 0; i + 1 < ${#a[@]}; i++)); do [ "${a[i]}" = -- ] && [ "${a[i + 1]}" = plan ] && a+=(--bytes) && break; done
  expect_shardc "${a[@]}"
  if grep -qi "warning.*recompute" <<<"$out"; then echo "FAIL: shardc $*: a warning names recompute:"; echo "$out"; status=1; fi
}
expect 0 "$m:25:10: note: offload: on the CPU target the optimizer state already lives in host memory" -- plan $m --world 1
expect 0 -- plan $m --world 1 --target cuda
bytes() { grep -m1 -A100 "$3" <<<"$1" | grep -m1 "^#   $2 " | awk '{ for (i = 1; i <= NF; i++) if ($i == "B") { print $(i - 1); exit } }'; }
on=$("$shardc" plan $m --world 1 --target cuda --bytes 2>/dev/null); off=$("$shardc" plan $m --world 1 --target cuda -D offload=off --bytes 2>/dev/null)
dev_on=$(bytes "$on" total "^# memory per rank"); dev_off=$(bytes "$off" total "^# memory per rank")
opt_off=$(bytes "$off" "optimizer state" "^# memory per rank"); opt_on=$(bytes "$on" "optimizer state" "^# memory per rank")
host_opt=$(bytes "$on" "optimizer state" "^# host memory per rank")
if [ -z "$host_opt" ] || [ "$opt_on" != 0 ] || [ "$host_opt" != "$opt_off" ] || [ $((dev_off - dev_on)) != "$opt_off" ]; then
  echo "FAIL: offload on CUDA: device total $dev_off -> $dev_on, optimizer state $opt_off -> $opt_on on the device, ${host_opt:-none} on the host"
  status=1
fi
ir=$("$shardc" plan $m --world 1 --target cuda --dump-ir 2>/dev/null)
for op in "= to_host(" "= to_device(" "@host = state  \"adam_m:"; do
  grep -qF -- "$op" <<<"$ir" || { echo "FAIL: offload on CUDA: no '$op' in --dump-ir"; status=1; }
done
expect 1 "error: \`offload\` moves ZeRO's sharded optimizer state to the host: it needs zero 1, 2 or 3 (the plan has zero 0)" \
  -- plan models/tiny.model --world 1 -D offload=on
expect 1 "error: \`recompute\` needs one of none, full or selective, got \`block\`" -- plan $m --world 1 -D recompute=block
expect 1 "got \`ful\`" "note: did you mean \`full\`?" -- plan $m --world 1 -D recompute=ful
for r in none selective full; do expect 0 -- plan models/tiny.model --world 1 -D recompute=$r; done
expect 0 -- plan models/tiny.model --world 2 -D zero=3 -D batch=32 # zero 3 with accumulation: planned
# a ZeRO stage with nothing to shard over (dp 1, cp 1) says so (it is not ignored silently): where the
# model file wrote it (gpt2-124m.model:28: `zero 1`), and for a -D; a plan that shards says nothing
expect 0 "models/gpt2-124m.model:28:3: note: zero 1: the data-parallel group is one rank (dp 1, cp 1): nothing to shard, the rank holds the whole optimizer state" \
  -- plan models/gpt2-124m.model --world 1 -D layers=1
expect 0 "note: zero 2: the data-parallel group is one rank (dp 1, cp 1): nothing to shard, the rank holds the whole optimizer state, gradients and parameters" \
  -- plan models/tiny.model --world 1 -D zero=2
if "$shardc" plan models/tiny.model --world 2 -D zero=2 2>&1 >/dev/null | grep -q "nothing to shard"; then
  echo "FAIL: zero 2 over dp 2 says it shards nothing"; status=1
fi
# weight_copy (passes/wshadow.c), decided by the driver against the device's memory: GPT-3 175B at tp 32 and
# tp 16 (ZeRO 1 over dp 32 / 16) fits with the persistent bf16 copies and keeps them, its f32 masters split
# (passes/zero_master.c: at tp 16 39,135 MiB saved, 74,014 MiB per rank, where the whole masters with the
# per-layer casts needed 92,369); at tp 16 under zero 0 (no split masters) the plan with them (191,420 MiB)
# does not fit the H100's 80 GiB and the per-layer casts are kept (170,548 MiB; 170,617 before the recomputed MLP's
# GELU backward wrote into its GEMM's output, passes/memplan.c: the fit check then refuses
# it, exit 1, with the report printed first); by hand, either; refused where it cannot apply
g3=(models/gpt3-175b.model --target cuda -D cross_node_tp=on)
expect_stdout=1 expect 0 "#   bf16 weights          10975322112 B     10466.88 MiB  persistent copies (in params)" "it fits: 41084.9 MiB" \
  "#   f32 masters           19206813696 B     18317.04 MiB  saved" -- plan "${g3[@]}" -D tp=32
expect_stdout=1 expect 0 "it fits: 74014.1 MiB" "#   f32 masters           41036451840 B     39135.41 MiB  saved" -- plan "${g3[@]}" -D tp=16
expect_stdout=1 expect 1 "cast where read (per layer in the loops)" "the plan with the persistent copy (20872.2 MiB) needs 191420.4 MiB per rank, over the device's 81920.0 MiB" \
  "the plan does not fit: 170,548 MiB per rank" -- plan "${g3[@]}" -D tp=16 -D zero=0
expect_stdout=1 expect 1 "weight_copy persistent (the plan)" "the plan does not fit: 191,420 MiB per rank" \
  -- plan "${g3[@]}" -D tp=16 -D zero=0 -D weight_copy=persistent
# ZeRO 1 with the persistent copies (passes/zero_master.c): GPT-2 124M at dp 8 stores its f32 masters split
# (parameters: 4 B x P / 8 + the 2 B x P copies, against 4 B x P whole with per-layer casts; the saving
# printed, 4 B x P x 7/8) and its optimizer all-gather moves the bf16 copies, half the f32 gather's bytes
gs=$("$shardc" plan models/gpt2-124m.model --target cuda -D zero=1 --bytes 2>/dev/null)
gw=$("$shardc" plan models/gpt2-124m.model --target cuda -D zero=1 -D weight_copy=per_layer --bytes 2>/dev/null)
ps=$(bytes "$gs" parameters "^# memory per rank") pw=$(bytes "$gw" parameters "^# memory per rank")
sv=$(grep -m1 "^#   f32 masters " <<<"$gs" | awk '{ print $4 }')
ags=$(grep -m1 "optimizer  all_gather" <<<"$gs" | awk '{ print $5 }') agw=$(grep -m1 "optimizer  all_gather" <<<"$gw" | awk '{ print $5 }')
if [ -z "$ps" ] || [ -z "$pw" ] || [ "$ps" != $((pw / 8 + pw / 2)) ] || [ "$sv" != $((pw / 8 * 7)) ] ||
  ! awk -v a="$ags" -v b="$agw" 'BEGIN { exit !(a > 0 && 2 * a - b < 0.15 && b - 2 * a < 0.15) }'; then
  echo "FAIL: GPT-2 zero 1 split masters: parameters $ps B (whole $pw), saved ${sv:-none} B, all-gather $ags MiB (whole $agw)"; status=1
fi
expect_stdout=1 expect 0 "weight_copy per_layer (the plan)" -- plan "${g3[@]}" -D tp=32 -D weight_copy=per_layer
expect 1 "<command line>:1:13: error: \`weight_copy persistent\`: the weights' bf16 copy is made under \`precision bf16\` on the CUDA target" \
  -- plan models/tiny.model --world 1 --target cuda -D weight_copy=persistent
expect 1 "<command line>:3:13: error: \`weight_copy persistent\`: zero 3 splits the parameters over dp" \
  -- plan models/tiny.model --world 2 --target cuda -D precision=bf16 -D zero=3 -D weight_copy=persistent
# ZeRO-3 at dp 1 shards over cp (passes/zero.c's group): no persistent copy there either (was: an internal error
# in fuse, the copy's cast reading the updated shard; fuzz_plans seed 884)
expect_stdout=1 expect 0 "kept, they would hold this: zero 3: each layer's bf16 rows gathered" \
  -- plan models/tiny.model --world 2 --target cuda -D precision=bf16 -D dp=1 -D cp=2 -D zero=3
expect 1 "<command line>:5:13: error: \`weight_copy persistent\`: zero 3 splits the parameters over dp (cp at dp 1)" \
  -- plan models/tiny.model --world 2 --target cuda -D precision=bf16 -D dp=1 -D cp=2 -D zero=3 -D weight_copy=persistent
expect 1 "error: \`weight_copy\` needs one of auto, persistent or per_layer, got \`always\`" \
  -- plan models/tiny.model --world 1 -D weight_copy=always
# --target cuda on a topology without a GPU: planned against the CPU's figures, which is said (it was
# silent); a GPU topology says nothing of it
expect 0 "models/topo/cpu.topo:2:1: note: topology \`cpu\` has no GPU (\`cpu x 2\`): this --target cuda plan's fit check and cost model use its CPU's figures (8 GiB of memory and 116 GFLOPS per rank)" \
  "note: to plan for a GPU, give its topology: --topology models/topo/h200-x1.topo" -- plan models/tiny.model --world 1 --target cuda
if "$shardc" plan models/tiny.model --target cuda --topology models/topo/h200-x1.topo 2>&1 >/dev/null | grep -q "has no GPU" ||
  "$shardc" plan models/tiny.model --world 1 2>&1 >/dev/null | grep -q "has no GPU"; then
  echo "FAIL: the no-GPU note on a GPU topology or the CPU target"; status=1
fi
# defer_waits (passes/zero_defer.c, replan.c): tiny zero 2 over dp 2 defers its backward loop's reduce-scatter
# waits, their f32 inputs (199,936 B) held through the body: 6,891,200 B per rank with them, 6,691,264 without.
# On a 6.5 MiB (6,815,744 B) device `auto` waits them in their own iteration, says why, and fits; `on` there
# does not fit (the fit check's error, which offers -D defer_waits=off); on 8 GiB auto takes them and says it fits. `on` / `off` where the plan
# has no such scatters (no ZeRO-2/3, a group of one rank, backward loops of one layer each: tiny's 2 layers
# over pp 2) is an error at the option, in the file (file:line:col, caret) or a -D's value, never ignored; a
# bad word is refused. Under pp the stages' B instructions' loops defer them (4 layers over pp 2, dp 2).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed 's/memory 8 GiB/memory 6.5 MiB/; s/topology cpu/topology cpu_6m5/' models/topo/cpu.topo >"$tmp/dm.topo"
dw="the backward loops' reduce-scatters waited"
expect_stdout=1 expect 0 "deferred waits                  0 B         0.00 MiB  $dw in their own iteration: the plan with them needs 6.6 MiB per rank, over the device's 6.5 MiB" \
  "#   total                     6691264 B         6.38 MiB" "6.50 MiB  cpu memory: fits" -- plan models/tiny.model --world 2 -D zero=2 --topology "$tmp/dm.topo"
expect_stdout=1 expect 1 "deferred waits             199936 B         0.19 MiB  $dw in the next iteration, their f32 inputs held through the body: defer_waits on (the plan)" \
  "error: the plan does not fit: 6.6 MiB per rank, over the cpu memory of 6.5 MiB" "note:   -D defer_waits=off: 6.4 MiB per rank, fits" -- plan models/tiny.model --world 2 -D zero=2 -D defer_waits=on --topology "$tmp/dm.topo"
expect_stdout=1 expect 0 "deferred waits             199936 B         0.19 MiB  $dw in the next iteration, their f32 inputs held through the body: it fits: 6.6 MiB per rank planned with them, of the device's 8192.0 MiB" \
  -- plan models/tiny.model --world 2 -D zero=2
expect_stdout=1 expect 0 "$dw in their own iteration: defer_waits off (the plan)" -- plan models/tiny.model --world 2 -D zero=3 -D defer_waits=off
dwhat="it defers the backward layer loops' ZeRO-2/3 gradient reduce-scatter waits to the next iteration; this plan has"
expect 1 "<command line>:2:13: error: \`defer_waits on\`: $dwhat no ZeRO-2/3" "note: leave \`defer_waits\` out (auto) to let shardc choose" \
  -- plan models/tiny.model --world 2 -D zero=1 -D defer_waits=on
expect 1 "error: \`defer_waits off\`: $dwhat a ZeRO group of one rank" -- plan models/tiny.model --world 1 -D zero=3 -D defer_waits=off
expect 1 "error: \`defer_waits on\`: $dwhat backward layer loops of one layer each (its pipeline stages' or chunks': no next iteration to wait in)" \
  -- plan models/tiny.model --world 4 -D zero=3 -D pp=2 -D microbatches=2 -D defer_waits=on
expect_stdout=1 expect 0 "$dw in their own iteration: its backward layer loops run one layer each (no next iteration to wait in)" \
  -- plan models/tiny.model --world 4 -D zero=3 -D pp=2 -D microbatches=2
expect_stdout=1 expect 0 "deferred waits             199936 B         0.19 MiB  $dw in the next iteration, their f32 inputs held through the body: defer_waits on (the plan)" \
  -- plan models/tiny.model --world 4 -D zero=3 -D pp=2 -D layers=4 -D microbatches=2 -D defer_waits=on
sed 's/^  dp auto$/  dp auto\n  zero 1\n  defer_waits on/' models/tiny.model >"$tmp/dw.model"
expect 1 "$tmp/dw.model:25:3: error: \`defer_waits on\`: $dwhat no ZeRO-2/3" "   25 |   defer_waits on" "      |   ^" -- plan "$tmp/dw.model" --world 2
expect 1 "error: \`defer_waits\` needs one of auto, on or off, got \`always\`" -- plan models/tiny.model --world 2 -D zero=2 -D defer_waits=always
# zb_w (passes/recompute.c, replan.c's auto_memory): tiny 8 layers pp 4 x 8 zb under full recompute, W holding the
# GEMM inputs B's recompute made: 196,608 B a micro-batch, 4.4 MiB per rank planned, 3.7 MiB with W recomputing them.
# On a 4 MiB device `auto` recomputes, says why, and fits; `hold` there does not fit (the fit check offers
# -D zb_w=recompute); on 8 GiB auto holds and says it fits. Written where no W recomputes (recompute none, no zb):
# an error at the option; a bad word is refused.
sed 's/memory 8 GiB/memory 4 MiB/; s/topology cpu/topology cpu_4m/' models/topo/cpu.topo >"$tmp/m4.topo"
zb=(plan models/tiny.model -D layers=8 -D micro_batch=1 -D batch=8 -D dp=1 -D pp=4 -D schedule=zb -D recompute=full --world 4)
zh="W takes the weight-gradient GEMMs' inputs B's recompute made, held from B to W, and runs no forward again"
expect_stdout=1 expect 0 "zb W inputs                     0 B         0.00 MiB  none held: W recomputes its weight-gradient GEMMs' inputs from the forward's saved values (the forward's GEMMs and attention again): the plan with the hold needs 4.4 MiB per rank, over the device's 4.0 MiB" \
  "4.00 MiB  cpu memory: fits" -- "${zb[@]}" --topology "$tmp/m4.topo"
expect_stdout=1 expect 1 "zb W inputs                196608 B         0.19 MiB  a micro-batch's (in activations): $zh: zb_w hold (the plan)" \
  "error: the plan does not fit: 4.4 MiB per rank, over the cpu memory of 4.0 MiB" "note:   -D zb_w=recompute: 3.7 MiB per rank, fits" -- "${zb[@]}" -D zb_w=hold --topology "$tmp/m4.topo"
expect_stdout=1 expect 0 "zb W inputs                196608 B         0.19 MiB  a micro-batch's (in activations): $zh: it fits: 4.4 MiB per rank planned with the hold, of the device's 8192.0 MiB" \
  -- "${zb[@]}"
zwhat="it chooses whether the zero-bubble schedule's W loops hold what B's recompute made or recompute it; this plan has"
expect 1 "error: \`zb_w hold\`: $zwhat no recompute (W reads the forward's saved values)" "note: leave \`zb_w\` out (auto) to let shardc choose" \
  -- "${zb[@]}" -D recompute=none -D zb_w=hold
expect 1 "error: \`zb_w recompute\`: $zwhat no zero-bubble schedule (\`schedule zb\`)" -- "${zb[@]}" -D schedule=1f1b -D zb_w=recompute
expect 1 "error: \`zb_w\` needs one of auto, hold or recompute, got \`always\`" -- "${zb[@]}" -D zb_w=always
# The two memory-dependent auto choices made together (replan.c, auto_memory): tiny zero 2 over dp 2 under bf16 on
# the CUDA target, its persistent bf16 copies and deferred waits: 3,975,488 B per rank with both, 3,781,312 with the
# copies alone, 3,975,744 with the deferred waits alone, 3,781,312 with neither (4,105,792 / 3,905,856 / 4,138,816 /
# 3,938,880 before GELU's backward wrote into its GEMM's output, passes/memplan.c). On 100 MiB both are kept; on
# 3.7 MiB (3,879,731 B) the copies alone; on 3.5 MiB nothing fits: neither, each line over, the fit check's error.
# (Under recompute full, 2,852,928 B with both, 2,652,992 with the copies alone, 2,885,952 with the deferred waits
# alone: where the deferred waits fit alone both fit too; the zb case below has each fit alone, not both.)
bf=(plan models/tiny.model --world 2 --target cuda -D precision=bf16 -D zero=2)
for mem in 100:100 3.7:3m7 3.5:3m5; do
  sed "s/memory 8 GiB/memory ${mem%%:*} MiB/; s/topology cpu/topology cpu_${mem##*:}/" models/topo/cpu.topo >"$tmp/b${mem##*:}.topo"
done
bw="persistent copies (in params), written by the update: one cast a step"
bl="cast where read (per layer in the loops); kept, they would hold this"
expect_stdout=1 expect 0 "#   total                     3975488 B" "$bw: it fits: 3.8 MiB per rank planned with it, of the device's 100.0 MiB" \
  "$dw in the next iteration, their f32 inputs held through the body: it fits: 3.8 MiB per rank planned with them, of the device's 100.0 MiB" \
  -- "${bf[@]}" --topology "$tmp/b100.topo"
expect_stdout=1 expect 0 "#   total                     3781312 B" "$bw: it fits: 3.6 MiB per rank planned with it, of the device's 3.7 MiB" \
  "$dw in their own iteration: the plan with them needs 3.8 MiB per rank, over the device's 3.7 MiB" "cpu memory: fits" \
  -- "${bf[@]}" --topology "$tmp/b3m7.topo"
expect_stdout=1 expect 1 "#   total                     3781312 B" "$bl: the plan with the persistent copy (0.2 MiB) needs 3.6 MiB per rank, over the device's 3.5 MiB" \
  "$dw in their own iteration: the plan with them needs 3.8 MiB per rank, over the device's 3.5 MiB" \
  "error: the plan does not fit: 3.6 MiB per rank, over the cpu memory of 3.5 MiB" -- "${bf[@]}" --topology "$tmp/b3m5.topo"
# zb_w joins them (one decision, replan.c's auto_memory): tiny 4 layers pp 2 x dp 2, zero 2, zb under full recompute,
# bf16 on the CUDA target against an A100's figures (p4d): 6,481,664 B per rank with the hold and the deferred
# waits, 6,347,264 with the hold alone, 5,295,360 with the deferred waits alone (W recomputes), 5,102,720 with
# neither (6,547,200 / 6,412,800 / 5,302,016 / 5,168,256 before session 41's recompute kept the GEMM epilogues,
# passes/recompute.c). On 6.1 MiB (6,396,314 B) each alone fits and the hold is faster: kept, the deferred waits
# dropped (was: the hold dropped first, alone, and the deferred waits kept); on 6.0 MiB the deferred waits with the
# hold for the last layer of each stage's 2 (6,021,888 B: its cut loops of one layer each keep their deferred waits
# across the cut, memplan_defer.c; was: they lost them, and the deferred waits alone were taken).
zd=(plan models/tiny.model --target cuda -D precision=bf16 -D zero=2 -D dp=2 -D pp=2 -D layers=4 -D microbatches=4 -D schedule=zb -D recompute=full --world 4)
for mem in 6.1:6m1 6.0:6m0; do
  sed "s/memory 40 GiB/memory ${mem%%:*} MiB/; s/topology p4d_x1/topology p4d_${mem##*:}/" models/topo/p4d-x1.topo >"$tmp/z${mem##*:}.topo"
done
expect_stdout=1 expect 0 "#   total                     6347264 B" \
  "zb W inputs                786432 B         0.75 MiB  a micro-batch's (in activations): $zh: it fits: 6.1 MiB per rank planned with the hold, of the device's 6.1 MiB" \
  "$dw in their own iteration: they fit alone: 5.1 MiB per rank planned with them, of the device's 6.1 MiB; not with the zb W hold too, which alone the cost model has faster" \
  -- "${zd[@]}" --topology "$tmp/z6m1.topo"
expect_stdout=1 expect 0 "#   total                     6021888 B" \
  "zb W inputs                393216 B         0.38 MiB  a micro-batch's (in activations), held for the last 1 layer of each stage's loop: there W takes the weight-gradient GEMMs' inputs B's recompute made, held from B to W; for the stage's other layers W recomputes them from the forward's saved values: the plan with the whole hold needs 6.1 MiB per rank, over the device's 6.0 MiB; with the hold for the last 1 layers, the most that fit: 5.7 MiB" \
  "$dw in the next iteration, their f32 inputs held through the body: it fits: 5.1 MiB per rank planned with them, of the device's 6.0 MiB" \
  -- "${zd[@]}" --topology "$tmp/z6m0.topo"
# zb_w hold(N) (passes/recompute_split.c): the same at 8 layers (4 a stage), per rank 9,315,328 B without the hold
# (the deferred waits kept; 9,321,984 before session 41), 9,908,480 / 10,512,384 / 11,285,504 holding for the last
# 1 / 2 / 3 layers of each stage (9,840,640 / 10,564,608 / 11,351,040 before session 41's recompute)
# (256 B more each before session 40's maker merges)
# (the cut loops keep their deferred waits, a loop of one layer too: was 9,777,920 / 10,595,584 / 11,348,224; hold(1)
# 9,809,280 before its halves' deferred scatters were unpacked as one, zero_defer.c's defer_pair; 9,840,960 /
# 10,675,648 / 11,581,056 before W took only the stacked inputs it reads, pipe_split.c),
# 12,074,496 with the whole hold (12,140,288 before session 41's recompute). On 10.5 MiB (11,010,048 B) auto holds for the last 2 (replan.c's partial_hold; was:
# none); hold(N) written is taken as written; N must be a whole number of at least 1 (source and -D).
# (the fit check's knob for the whole hold written: -D zb_w=hold:2, half of a stage's layers)
z8=(plan models/tiny.model --target cuda -D precision=bf16 -D zero=2 -D dp=2 -D pp=2 -D layers=8 -D microbatches=4 -D schedule=zb -D recompute=full --world 4)
sed "s/memory 40 GiB/memory 10.5 MiB/; s/topology p4d_x1/topology p4d_10m5/" models/topo/p4d-x1.topo >"$tmp/z10m5.topo"
zp="a micro-batch's (in activations), held for the last 2 layers of each stage's loop: there W takes the weight-gradient GEMMs' inputs B's recompute made, held from B to W; for the stage's other layers W recomputes them from the forward's saved values"
expect_stdout=1 expect 0 "#   total                    10512384 B" \
  "zb W inputs                786432 B         0.75 MiB  $zp: the plan with the whole hold needs 11.2 MiB per rank, over the device's 10.5 MiB; with the hold for the last 2 layers, the most that fit: 10.0 MiB" \
  -- "${z8[@]}" --topology "$tmp/z10m5.topo"
expect_stdout=1 expect 0 "#   total                     9908480 B" "held for the last 1 layer of each stage's loop" "zb_w hold(1) (the plan)" \
  -- "${z8[@]}" -D zb_w=hold:1
# the whole hold written there does not fit: the fit check offers the hold for half of each stage's layers
expect 1 "error: the plan does not fit: 11.2 MiB per rank" "note:   -D zb_w=hold:2 (the hold for the last 2 of each stage's 4 layers): 10.0 MiB per rank, fits" \
  -- "${z8[@]}" -D zb_w=hold --topology "$tmp/z10m5.topo"
expect 1 "<command line>:9:11: error: \`zb_w hold:N\`: N is the layers of each stage held (its last N), a whole number of at least 1, got \`0\`" \
  "    9 | zb_w=hold:0" "      |           ^" -- "${z8[@]}" -D zb_w=hold:0
sed 's/^  dp auto$/  dp auto\n  zb_w hold(1.5)/' models/tiny.model >"$tmp/zh.model"
expect 1 "$tmp/zh.model:24:13: error: \`zb_w hold(N)\`: N is the layers of each stage held (its last N), a whole number of at least 1" \
  "   24 |   zb_w hold(1.5)" "      |             ^" -- plan "$tmp/zh.model" --world 2
# The plan's own compile where the driver's check compiled it already (replan.c, replan_plan: the auto choices
# all taken, their whys made again from the figures, the passes' diagnostics written again): the same printout
# as a fresh compile of it (--time-passes shows the passes as they run: compiled again, not reused), stdout and
# stderr but the pass times; and the same printout where the figures change a choice (z6m1: a choice lost).
for args in "plan models/tiny.model --world 2 -D zero=2" "plan models/gpt2-124m.model --target cuda -D zero=1" \
  "plan models/gpt2-124m.model -D pp=2 -D schedule=interleaved -D zero=3" "${zd[*]} --topology $tmp/z6m1.topo" "${zd[*]}"; do
  # shellcheck disable=SC2086
  o1=$("$shardc" $args 2>"$tmp/e1"); r1=$?
  # shellcheck disable=SC2086
  o2=$("$shardc" $args --time-passes 2>"$tmp/e2"); r2=$?
  grep -v '^shardc: pass \|^shardc: ir_verify' "$tmp/e2" >"$tmp/e2f"
  if [ "$o1" != "$o2" ] || [ $r1 != $r2 ] || ! cmp -s "$tmp/e1" "$tmp/e2f" || ! grep -q "it fits\|fit alone" <<<"$o1"; then
    echo "FAIL: shardc $args: the reused check compile's printout differs from a fresh compile's (or says no fit)"
    diff <(echo "$o1") <(echo "$o2") | head -5; diff "$tmp/e1" "$tmp/e2f" | head -5
    status=1
  fi
done
# the target: the CPU by default, also on a topology of GPUs, said in the plan's header (and by a note after a build)
expect_stdout=1 expect_shardc 0 "# target cpu: the default, not topology \`p4d_x1\`'s GPUs (a100_40g): --target cuda plans and builds for them" \
  -- plan models/gpt2-124m.model -D layers=1
expect_stdout=1 expect_shardc 0 "# target cpu: the default; topology \`cpu\`'s ranks are CPU processes" -- plan models/tiny.model
expect_stdout=1 expect_shardc 0 "# target cuda: given with --target" -- plan models/gpt2-124m.model -D layers=1 --target cuda
expect_shardc 0 "note: $tmp/g1 is a CPU trainer (the default target), not one for topology \`p4d_x1\`'s GPUs (a100_40g): --target cuda builds for them" \
  -- build models/gpt2-124m.model -D layers=1 -o "$tmp/g1"
expect_shardc 0 -- build models/tiny.model --world 1 -o "$tmp/t1"
! grep -q "CPU trainer" <<<"$out" || { echo "FAIL: a CPU topology's build noted the target: $out"; status=1; }
# the memory table for people: KiB / MiB / GiB, no byte counts; --bytes gives them (scripts), and only to `shardc plan`
expect_stdout=1 expect_shardc 0 "#   parameters           471.0 KiB" "#   activations           5.14 MiB" \
  "#   capacity              8.00 GiB  cpu memory: fits" -- plan models/tiny.model
! grep -A12 "^# memory per rank" <<<"$out" | grep -qE "[0-9]{4,} B" || { echo "FAIL: byte counts in the memory table:"; echo "$out"; status=1; }
expect_stdout=1 expect_shardc 0 "#   parameters                 482304 B         0.46 MiB" -- plan models/tiny.model --bytes
expect_shardc 1 "error: --bytes prints the sizes of \`shardc plan\`'s memory table in bytes" -- build models/tiny.model --bytes -o "$tmp/t"
[ $status = 0 ] && echo "plan options: recompute applied, offload noted on CPU and applied on CUDA, bad kinds refused, zero over one rank noted, weight_copy, defer_waits and zb_w decided (together) and refused; the memory table in KiB / MiB / GiB, bytes with --bytes"
exit $status
