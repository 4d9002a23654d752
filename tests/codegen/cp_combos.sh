#!/usr/bin/env bash
# Context parallelism with ZeRO-2 / 3 and with pipeline parallelism, compiled and run under mpirun
# against the single-rank binary (label mpi; tests/codegen/cp.sh runs cp alone, with tp and dp):
#
#   cp=2 x dp=2 under ZeRO-2 (a Llama-shaped model at 256 tokens) and ZeRO-3 (the tiny GPT, 2
#   gradient-accumulation micro-steps), sharded over the dp x cp group: each gradient bucket
#   reduce-scattered over the group, the optimizer states split over dp and then cp (asserted in the
#   plan), each run's step-10 checkpoint resumed on one rank; at dp 1, ZeRO-3 over cp alone (the Llama,
#   cp=2); pp=2 x cp=2 of the tiny GPT (1f1b, 4 micro-batches; interleaved, 2 chunks)
#   and of the Llama (cp_mode all2all, zb, 2 micro-batches): each stage's layers run their ring (or
#   all-to-alls) among the stage's cp ranks; cp=2 x tp=2 + sp of the Llama (ring; all2all with 8
#   heads / 4 kv heads): each cp rank's sequence split again over tp between the tp blocks (its
#   step-10 checkpoint resumes on one rank with the uninterrupted step-11 loss); cp=4 of the Llama under
#   recompute full and cp=2 of the tiny GPT under selective (the ring run again in the backward). 20 AdamW
#   steps, every loss within 1e-5 of the single rank's (lib.sh's tolerance, justified in layouts.sh;
#   cp.sh says why cp reorders fp32 sums).
set -euo pipefail
shardc=$(realpath "$1")
cd "$(dirname "$0")/../.."
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh

m=(models/llama3-8b.model -D vocab=256 -D seq=256 -D d=64 -D heads=4 -D kv_heads=2 -D layers=2 -D ffn=96
   -D batch=2 -D micro_batch=2 -D dp=1 -D zero=0 -D sp=off)
"$shardc" build "${m[@]}" -D tp=1 -D cp=1 --world 1 -o "$t/one" 2>/dev/null
"$t/one" "${run[@]}" --threads 2 --log "$t/one.jsonl" >/dev/null
"$shardc" build models/tiny.model -D seq=64 -D micro_batch=4 --world 1 -o "$t/tiny1" 2>/dev/null
"$t/tiny1" "${run[@]}" --threads 2 --log "$t/tiny1.jsonl" >/dev/null
# ZeRO-2 / 3 under cp=2 x dp=2 (passes/zero.c) shard over the dp x cp group (the cp ranks of a replica
# hold the same parameters and each a partial gradient over its chunks): each gradient bucket
# reduce-scattered over the group, nothing all-reduced over cp after it; the loss still over the
# group; the optimizer states (and ZeRO-3's parameters, gathered per reader) 1/4 per rank, split over
# dp and then cp. Llama-shaped zero 2 and tiny zero 3 with 2 accumulation micro-steps.
mz=("${m[@]/micro_batch=2/micro_batch=1}")
mz=("${mz[@]/zero=0/zero=2}")
"$shardc" build "${mz[@]}" -D tp=1 -D dp=2 -D cp=2 --world 4 -o "$t/cp2dp2z2" 2>/dev/null
"${mpi[@]}" -np 4 "$t/cp2dp2z2" "${run[@]}" --log "$t/cp2dp2z2.jsonl" >/dev/null
compare "llama seq 256 cp2dp2 zero 2" "$t/cp2dp2z2.jsonl" "$t/one.jsonl"
tz=(models/tiny.model -D seq=64 -D batch=4 -D micro_batch=1 -D dp=2 -D cp=2 -D zero=3 --world 4)
"$shardc" build "${tz[@]}" -o "$t/tinyz3" 2>/dev/null
"${mpi[@]}" -np 4 "$t/tinyz3" "${run[@]}" --log "$t/tinyz3.jsonl" >/dev/null
compare "tiny cp2 x dp2 zero 3 acc 2" "$t/tinyz3.jsonl" "$t/tiny1.jsonl"
for c in "${mz[*]} -D tp=1 -D dp=2 -D cp=2 --world 4" "${tz[*]}"; do
  # shellcheck disable=SC2086
  ir=$("$shardc" plan $c --dump-ir 2>/dev/null)
  nrs=$(grep -c "= reduce_scatter(.*over=dp with=cp axis" <<<"$ir" || true)
  nrd=$(grep -c "= reduce_scatter(.*over=dp axis" <<<"$ir" || true)
  ncp=$(grep -c "= all_reduce(.*over=cp reduce=sum" <<<"$ir" || true)
  nw=$(grep -c "all_reduce(.*over=dp with=cp reduce=sum" <<<"$ir" || true)
  nst=$(grep -c '{S(dp)@[0-9]>S(cp)} = state ' <<<"$ir" || true)
  [ "$nrs" -gt 0 ] && [ "$nrd" -eq 0 ] && [ "$ncp" -eq 0 ] && [ "$nw" -gt 0 ] && [ "$nst" -gt 0 ] ||
    { echo "FAIL: zero under cp2dp2: $nrs reduce-scatters over dp x cp, $nrd over dp alone, $ncp all-reduces over cp," \
        "$nw over dp x cp, $nst states split over dp x cp"; exit 1; }
  echo "zero under cp2dp2: $nrs gradient reduce-scatters over dp x cp, none over cp after them; $nw all-reduces" \
    "over dp x cp; $nst optimizer states split over dp x cp"
done
# the states (ZeRO-3: and parameters) split over dp x cp checkpoint logically: resumed on one rank
resume_on_one "cp2 x dp2 zero 2" 4 "$t/cp2dp2z2" "$t/cp2dp2z2.jsonl" "$t/one"
resume_on_one "tiny cp2 x dp2 zero 3" 4 "$t/tinyz3" "$t/tinyz3.jsonl" "$t/tiny1"
# at dp 1 ZeRO shards over cp alone: the Llama's ZeRO-3 at cp=2 (states and parameters split over cp,
# the gradients reduce-scattered over it)
mc=("${m[@]/zero=0/zero=3}")
ir=$("$shardc" plan "${mc[@]}" -D tp=1 -D cp=2 --world 2 --dump-ir 2>/dev/null)
nrs=$(grep -c "= reduce_scatter(.*over=cp axis" <<<"$ir" || true)
nst=$(grep -c '{S(cp)@[0-9]} = state ' <<<"$ir" || true)
[ "$nrs" -gt 0 ] && [ "$nst" -gt 0 ] || { echo "FAIL: zero 3 at cp2: $nrs reduce-scatters over cp, $nst states split over cp"; exit 1; }
echo "zero 3 at cp2 (dp 1): $nrs gradient reduce-scatters over cp, $nst optimizer states split over cp"
"$shardc" build "${mc[@]}" -D tp=1 -D cp=2 --world 2 -o "$t/cp2z3" 2>/dev/null
"${mpi[@]}" -np 2 "$t/cp2z3" "${run[@]}" --log "$t/cp2z3.jsonl" >/dev/null
compare "llama seq 256 cp2 zero 3" "$t/cp2z3.jsonl" "$t/one.jsonl"
# pp=2 x cp=2 (4 ranks: ranks 0, 1 the first stage's cp ring, 2, 3 the second's): each stage's
# instructions run their layers' ring (or all-to-alls) among the stage's cp ranks; the tiny GPT
# (1f1b, 4 micro-batches) and the Llama-shaped model (all2all, zb, 2 micro-batches)
"$shardc" build models/tiny.model -D seq=64 -D batch=4 -D micro_batch=1 -D dp=1 -D pp=2 -D cp=2 --world 4 \
  -o "$t/tinypp" 2>/dev/null
"${mpi[@]}" -np 4 "$t/tinypp" "${run[@]}" --log "$t/tinypp.jsonl" >/dev/null
compare "tiny pp2 x cp2 1f1b" "$t/tinypp.jsonl" "$t/tiny1.jsonl"
# interleaved (2 chunks a stage, 4 micro-batches): a stage's activation send waits for its receiver while the
# stage's ring hops go on; over shm that held the hops' sends back for ever (a deadlock: the provider completes
# a rank's sends in order) until sends on one host were pulled by their receivers (runtime/comm/direct.c)
"$shardc" build models/tiny.model -D layers=4 -D seq=64 -D micro_batch=4 --world 1 -o "$t/tiny4" 2>/dev/null
"$t/tiny4" "${run[@]}" --threads 2 --log "$t/tiny4.jsonl" >/dev/null
"$shardc" build models/tiny.model -D layers=4 -D seq=64 -D batch=4 -D micro_batch=1 -D dp=1 -D pp=2 -D cp=2 \
  -D schedule=interleaved -D interleave=2 --world 4 -o "$t/tinyppi" 2>/dev/null
"${mpi[@]}" -np 4 -x SHARDRT_TIMEOUT=60 "$t/tinyppi" "${run[@]}" --log "$t/tinyppi.jsonl" >/dev/null
compare "tiny 4 layers pp2 x cp2 int2" "$t/tinyppi.jsonl" "$t/tiny4.jsonl"
"$shardc" build "${m[@]/micro_batch=2/micro_batch=1}" -D tp=1 -D pp=2 -D cp=2 -D cp_mode=all2all -D schedule=zb \
  --world 4 -o "$t/pp2cp2" 2>/dev/null
"${mpi[@]}" -np 4 "$t/pp2cp2" "${run[@]}" --log "$t/pp2cp2.jsonl" >/dev/null
compare "llama pp2 x cp2 all2all zb" "$t/pp2cp2.jsonl" "$t/one.jsonl"
# sp with cp (Sharding.inner): under cp=2 x tp=2 + sp the activations between the tp blocks hold each
# cp rank's sequence split again over tp (reduce-scattered over tp after each row-parallel matmul,
# all-gathered before the next column-parallel one, within the rank's zigzag chunks: asserted in the
# plan); the Llama above with the ring, and with 8 heads / 4 kv heads under all2all
msp=("${m[@]/sp=off/sp=on}")
m8=("${msp[@]/heads=4/heads=8}")
m8=("${m8[@]/kv_heads=2/kv_heads=4}")
ir=$("$shardc" plan "${msp[@]}" -D tp=2 -D cp=2 --world 4 --dump-ir 2>/dev/null)
nrs=$(grep -c '{S(cp)@1/zigzag>S(tp)} = reduce_scatter(%[0-9]*)  over=tp axis=1' <<<"$ir" || true)
nag=$(grep -c '{S(cp)@1/zigzag} = all_gather(%[0-9]*)  over=tp axis=1' <<<"$ir" || true)
[ "$nrs" -gt 0 ] && [ "$nag" -gt 0 ] ||
  { echo "FAIL: sp under cp2 x tp2: $nrs reduce-scatters and $nag all-gathers over tp within the cp chunks"; exit 1; }
echo "sp under cp2 x tp2: $nrs reduce-scatters and $nag all-gathers over tp within each cp rank's sequence"
"$shardc" build "${msp[@]}" -D tp=2 -D cp=2 --world 4 -o "$t/cp2tp2sp" 2>/dev/null
"${mpi[@]}" -np 4 "$t/cp2tp2sp" "${run[@]}" --log "$t/cp2tp2sp.jsonl" >/dev/null
compare "llama cp2 x tp2 + sp ring" "$t/cp2tp2sp.jsonl" "$t/one.jsonl"
# its checkpoint (parameters never carry the inner split) resumes on one rank
resume_on_one "cp2 x tp2 + sp" 4 "$t/cp2tp2sp" "$t/cp2tp2sp.jsonl" "$t/one"
"$shardc" build "${m8[@]}" -D tp=1 -D cp=1 --world 1 -o "$t/one8" 2>/dev/null
"$t/one8" "${run[@]}" --threads 2 --log "$t/one8.jsonl" >/dev/null
"$shardc" build "${m8[@]}" -D tp=2 -D cp=2 -D cp_mode=all2all --world 4 -o "$t/cp2tp2spa" 2>/dev/null
"${mpi[@]}" -np 4 "$t/cp2tp2spa" "${run[@]}" --log "$t/cp2tp2spa.jsonl" >/dev/null
compare "llama 8/4 heads cp2 x tp2 + sp all2all" "$t/cp2tp2spa.jsonl" "$t/one8.jsonl"
# full recompute under cp 4 (ring): the backward loop passes the forward's K and V around the ring again (3 hops,
# in the forward's order) rather than keep them (passes/recompute.c ring_hops); the Llama above on 4 ranks
"$shardc" build "${m[@]}" -D tp=1 -D cp=4 -D recompute=full --world 4 -o "$t/cp4full" 2>/dev/null
"${mpi[@]}" -np 4 "$t/cp4full" "${run[@]}" --log "$t/cp4full.jsonl" >/dev/null
compare "llama seq 256 cp4 recompute full" "$t/cp4full.jsonl" "$t/one.jsonl"
# selective recomputes the attention blocks, so their hops too: the tiny GPT at cp 2
"$shardc" build models/tiny.model -D seq=64 -D batch=4 -D micro_batch=4 -D dp=1 -D cp=2 -D recompute=selective \
  --world 2 -o "$t/tinysel" 2>/dev/null
"${mpi[@]}" -np 2 "$t/tinysel" "${run[@]}" --log "$t/tinysel.jsonl" >/dev/null
compare "tiny cp2 recompute selective" "$t/tinysel.jsonl" "$t/tiny1.jsonl"
# the trainer's eval (a subsequence of step) recomputes what the micro-step's body reads of the top graph: cp 2 x
# ZeRO-2 x recompute full with 2 micro-steps gave the position ids' bytes to a reduce-scatter after their last
# reader in step, and eval's embedding read garbage ids (tests/codegen/cp_eval.model, found by scripts/fuzz_runs.sh)
"$shardc" build tests/codegen/cp_eval.model --world 2 -o "$t/cpeval" 2>/dev/null
"$shardc" build tests/codegen/cp_eval.model -D cp=1 -D zero=0 -D micro_batch=4 --world 1 -o "$t/cpeval1" 2>/dev/null
"$t/cpeval1" "${run[@]}" --threads 2 --log "$t/cpeval1.jsonl" >/dev/null
"${mpi[@]}" -np 2 "$t/cpeval" "${run[@]}" --log "$t/cpeval.jsonl" >/dev/null
compare "cp2 zero 2 rc full acc 2" "$t/cpeval.jsonl" "$t/cpeval1.jsonl"
vl() { grep -o '"val_loss":[^,}]*' "$1" | cut -d: -f2; }
awk -v a="$(vl "$t/cpeval.jsonl")" -v b="$(vl "$t/cpeval1.jsonl")" 'BEGIN { d = a - b; if (d < 0) d = -d;
  printf "cp2 zero 2 rc full acc 2: val loss %s vs %s on 1 rank\n", a, b; exit !(a != "" && d <= 1e-5 * b) }' ||
  fail "cp2 zero 2 rc full acc 2: the validation loss differs from one rank's"
echo "context parallelism with ZeRO, pp and sp: ok"
