#!/usr/bin/env bash
# Context parallelism (passes/shard_cp.c: the sequence in zigzag chunks over cp, ring attention)
# compiled and run under mpirun against the single-rank binary (label mpi).
#
#   a Llama-shaped model (RMSNorm, SwiGLU, RoPE, GQA, untied head) at 256 tokens with small dims:
#   cp=2, cp=2 x tp=2, cp=2 x dp=2 and cp=4 give the single-rank loss curve over 20 AdamW steps
#   (cp=4 with overlapped ring hops and asynchronous gradient buckets over cp bit-identical to
#   blocking ones), and so do cp_mode all2all's
#   cp=4 and cp=2 x tp=2 (a model with 8 heads / 4 kv heads); at 1024 tokens
#   cp=2 and cp=2 x tp=2 ring and cp=2 all2all give the single-rank losses over 10 steps; and so
#   does cp=2 of the tiny GPT (learned position embeddings, fused QKV), and cp=2 x dp=2 of it with
#   2 gradient-accumulation micro-steps (cp=2 x dp=2 reduces its gradients over the dp x cp group in
#   one all-reduce per bucket, asserted in the plan); a checkpoint written
#   under cp=2 at step 10 resumes on one rank with the uninterrupted run's step-11 loss (the data
#   loader reads each rank's zigzag chunks, checkpoints hold logical tensors).
#
# Tolerance: |loss - loss_1rank| <= 1e-5 * |loss_1rank| at every step (lib.sh's, justified in
# layouts.sh): ring attention adds its blocks' softmax parts in another order (an online
# log-sum-exp combine instead of one pass) and the weight gradients are partial sums over cp
# all-reduced: fp32 reorderings of a few ulps, like tp's.
set -euo pipefail
shardc=$(realpath "$1")
cd "$(dirname "$0")/../.."
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh

m=(models/llama3-8b.model -D vocab=256 -D seq=256 -D d=64 -D heads=4 -D kv_heads=2 -D layers=2 -D ffn=96
   -D batch=2 -D micro_batch=2 -D dp=1 -D zero=0 -D sp=off)
"$shardc" build "${m[@]}" -D tp=1 -D cp=1 --world 1 -o "$t/one" 2>/dev/null
"$shardc" build "${m[@]}" -D tp=1 -D cp=2 --world 2 -o "$t/cp2" 2>/dev/null
"$shardc" build "${m[@]}" -D tp=2 -D cp=2 --world 4 -o "$t/cp2tp2" 2>/dev/null
"$shardc" build "${m[@]/micro_batch=2/micro_batch=1}" -D tp=1 -D dp=2 -D cp=2 --world 4 -o "$t/cp2dp2" 2>/dev/null
"$t/one" "${run[@]}" --threads 2 --log "$t/one.jsonl" >/dev/null
for c in cp2:2 cp2tp2:4 cp2dp2:4; do
  n=${c%%:*}
  "${mpi[@]}" -np "${c#*:}" "$t/$n" "${run[@]}" --log "$t/$n.jsonl" >/dev/null
  compare "llama seq 256 $n" "$t/$n.jsonl" "$t/one.jsonl"
done
# cp=2 x dp=2: each gradient bucket (and the loss) is reduced by one all-reduce over the combined dp x cp
# group (4 ranks), none over dp or over cp alone; the plan's traffic table shows it as the dp*cp group
ir=$("$shardc" plan "${m[@]/micro_batch=2/micro_batch=1}" -D tp=1 -D dp=2 -D cp=2 --world 4 --dump-ir 2>/dev/null)
ng=$(grep -c "all_reduce(.*over=dp with=cp reduce=sum" <<<"$ir" || true)
na=$(grep -c "all_reduce(.*over=\(dp\|cp\) reduce=" <<<"$ir" || true)
[ "$ng" -gt 0 ] && [ "$na" -eq 0 ] || { echo "FAIL: cp2dp2: $ng all-reduces over dp x cp, $na over dp or cp alone"; exit 1; }
pl=$("$shardc" plan "${m[@]/micro_batch=2/micro_batch=1}" -D tp=1 -D dp=2 -D cp=2 --world 4 2>/dev/null)
grep -q "^#   dp\*cp    x4 .*all_reduce" <<<"$pl" || { echo "FAIL: cp2dp2: no dp*cp x4 all_reduce row in the plan's traffic"; exit 1; }
echo "cp2dp2: $ng all-reduces over the dp x cp group (x4), none over dp or cp alone"
# cp=4: three hops per ring. Each hop is started before the block it overlaps and waited before
# its first reader (rt_coll_shift_start); SHARDRT_CP_COMM=blocking runs the same binary with
# blocking shifts (the ring before overlap): the losses and the checkpoint (parameters and Adam
# moments) must be bit-identical, and both match the single rank.
# At dp 1 the weight gradients' all-reduces run over cp alone, bucketed and asynchronous like dp's
# (passes/grad_buckets.c, ir_comm_async): one bucket per layer inside the backward loop, started
# there and waited before its first reader; the blocking run also makes them blocking
# (SHARDRT_DP_COMM=blocking), and the async run must have started some (SHARDRT_COLL_STATS).
"$shardc" build "${m[@]}" -D tp=1 -D cp=4 --world 4 -o "$t/cp4" --emit-c "$t/cp4src" 2>/dev/null
grep -q 'rt_coll_all_reduce_start(ctx, RT_AX_CP, [0-9]*, ys, xs, ns, [2-9]' "$t/cp4src/"*.c ||
  { echo "FAIL: cp4: no asynchronous multi-member gradient bucket over cp"; exit 1; }
for mode in async blocking; do
  SHARDRT_CP_COMM=$mode SHARDRT_DP_COMM=$mode SHARDRT_COLL_STATS=1 "${mpi[@]}" -x SHARDRT_CP_COMM -x SHARDRT_DP_COMM \
    -x SHARDRT_COLL_STATS -np 4 "$t/cp4" "${run[@]}" --log "$t/cp4_$mode.jsonl" --save-to "$t/ck_cp4_$mode" \
    >/dev/null 2>"$t/cp4_$mode.err"
  compare "llama seq 256 cp4 $mode" "$t/cp4_$mode.jsonl" "$t/one.jsonl"
done
na=$(grep -m1 -o 'async all-reduces [0-9]*' "$t/cp4_async.err" | awk '{ print $3 }')
[ "${na:-0}" -gt 0 ] || { echo "FAIL: cp4: no asynchronous all-reduce started"; cat "$t/cp4_async.err"; exit 1; }
echo "cp4: $na asynchronous gradient all-reduces over cp started by rank 0"
cmp -s <(losses "$t/cp4_async.jsonl") <(losses "$t/cp4_blocking.jsonl") ||
  { echo "FAIL: cp4 losses differ between overlapped and blocking ring hops"; exit 1; }
nck=0
for f in "$t"/ck_cp4_blocking/step_00000020/*; do
  cmp -s "$f" "$t/ck_cp4_async/step_00000020/$(basename "$f")" ||
    { echo "FAIL: cp4 checkpoint $(basename "$f") differs between overlapped and blocking ring hops"; exit 1; }
  nck=$((nck + 1))
done
[ "$nck" -gt 0 ] || { echo "FAIL: no cp4 checkpoint written"; exit 1; }
echo "cp4 overlapped ring hops and gradient buckets: losses and $nck checkpoint files bit-identical to blocking ones"
# cp_mode all2all (Ulysses: the sequence split exchanged for a split of the heads around attention):
# a GQA model with 8 heads / 4 kv heads under cp=4 and cp=2 x tp=2 (cp=2 at 1024 tokens below)
m8=("${m[@]/heads=4/heads=8}")
m8=("${m8[@]/kv_heads=2/kv_heads=4}")
"$shardc" build "${m8[@]}" -D tp=1 -D cp=1 --world 1 -o "$t/one8" 2>/dev/null
"$t/one8" "${run[@]}" --threads 2 --log "$t/one8.jsonl" >/dev/null
"$shardc" build "${m8[@]}" -D tp=1 -D cp=4 -D cp_mode=all2all --world 4 -o "$t/a2a_cp4" 2>/dev/null
"$shardc" build "${m8[@]}" -D tp=2 -D cp=2 -D cp_mode=all2all --world 4 -o "$t/a2a_cp2tp2" 2>/dev/null
for n in a2a_cp4 a2a_cp2tp2; do
  "${mpi[@]}" -np 4 "$t/$n" "${run[@]}" --log "$t/$n.jsonl" >/dev/null
  compare "llama 8/4 heads $n" "$t/$n.jsonl" "$t/one8.jsonl"
done
# a longer sequence (1024 tokens, one sequence per step, d 64): cp2 ring, cp2 x tp2 ring and cp2
# all2all against the single rank over 10 steps
m1k=(models/llama3-8b.model -D vocab=256 -D seq=1024 -D d=64 -D heads=4 -D kv_heads=2 -D layers=2 -D ffn=96
     -D batch=1 -D micro_batch=1 -D dp=1 -D zero=0 -D sp=off)
run10=(--data "$t/data.txt" --steps 10 --eval-every 0 --val-batches 1)
"$shardc" build "${m1k[@]}" -D tp=1 -D cp=1 --world 1 -o "$t/one1k" 2>/dev/null
"$t/one1k" "${run10[@]}" --threads 2 --log "$t/one1k.jsonl" >/dev/null
for c in cp2:1:2:ring cp2tp2:2:4:ring a2a_cp2:1:2:all2all; do
  IFS=: read -r n tp np mode <<<"$c"
  "$shardc" build "${m1k[@]}" -D tp="$tp" -D cp=2 -D cp_mode="$mode" --world "$np" -o "$t/${n}_1k" 2>/dev/null
  "${mpi[@]}" -np "$np" "$t/${n}_1k" "${run10[@]}" --log "$t/${n}_1k.jsonl" >/dev/null
  compare "llama seq 1024 $n" "$t/${n}_1k.jsonl" "$t/one1k.jsonl" 10
done
"$shardc" build models/tiny.model -D seq=64 -D micro_batch=4 --world 1 -o "$t/tiny1" 2>/dev/null
"$shardc" build models/tiny.model -D seq=64 -D micro_batch=4 -D dp=1 -D cp=2 --world 2 -o "$t/tinycp2" 2>/dev/null
"$t/tiny1" "${run[@]}" --threads 2 --log "$t/tiny1.jsonl" >/dev/null
"${mpi[@]}" -np 2 "$t/tinycp2" "${run[@]}" --log "$t/tinycp2.jsonl" >/dev/null
compare "tiny seq 64 cp2" "$t/tinycp2.jsonl" "$t/tiny1.jsonl"
# cp=2 x dp=2 with 2 accumulation micro-steps (the last one after the loop, passes/peel.c: its
# ring attention's sends and receives at the top level)
"$shardc" build models/tiny.model -D seq=64 -D batch=4 -D micro_batch=1 -D dp=2 -D cp=2 --world 4 -o "$t/tinyacc" 2>/dev/null
"${mpi[@]}" -np 4 "$t/tinyacc" "${run[@]}" --log "$t/tinyacc.jsonl" >/dev/null
compare "tiny cp2 x dp2, accum 2" "$t/tinyacc.jsonl" "$t/tiny1.jsonl"
# a cp=2 checkpoint resumes on one rank
resume_on_one cp2 2 "$t/cp2" "$t/cp2.jsonl" "$t/one"
echo "context parallelism: ok"
