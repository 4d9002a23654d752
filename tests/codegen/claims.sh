#!/usr/bin/env bash
# tests/codegen/claims.sh — what `shardc plan` claims about a rank, bit for bit against what the trainer
# does (docs/performance.md "Claims against runs (session 33 audit)"), on five layouts of tiny (2 and 4
# ranks, 2 steps each): ZeRO-3 with accumulation, tp + sp, pp zb, cp ring, pp x dp with ZeRO-1.
#   collectives: every rank counts its step's collectives by group and kind, calls and bytes
#     (runtime/ops/coll_count.c) and checks them against its pipeline stage's in the plan (codegen writes
#     them, RtProgram.coll_plan): "as planned", no rank warning; without pp rank 0's calls and bytes are the
#     plan's printed total (count) too.
#   memory: the allocation is the plan's total (bytes); the parameters and the optimizer state the ranks
#     hold (the tensor table) are the plan's classes exactly (under pp: the stage whose peak the plan's
#     table is, the worst); the inputs are the class less its 64-byte alignment (under 64 B each).
#   FLOPs: without pp, the matmuls a rank runs a step (counted in rt_matmul_*) are 7/8 of the plan's model
#     FLOPs per rank (tiny: attention is 32768 of the 262144 a token), so the FLOPs per token the trainer's MFU
#     divides by are the model's (pp x dp had 2.56x them: ir/flops.c, tests/report/flops.sh).
#   and the check can fail: with one all-reduce per bucket member (SHARDRT_DP_COMM=member) the counts
#     differ from the plan, and the trainer says so.
# Usage: tests/codegen/claims.sh SHARDC
set -euo pipefail
shardc=$(realpath "$1")
cd "$(dirname "$0")/../.."
# shellcheck source=tests/lib.sh
source tests/lib.sh
corpus 40000

# check NAME NP DEFINES...
check() {
  local name=$1 np=$2 plan="$t/$1.plan" log="$t/$1.log"
  shift 2
  "$shardc" plan models/tiny.model "$@" --world "$np" --bytes >"$plan" 2>&1 || fail "$name: shardc plan: $(tail -3 "$plan")"
  "$shardc" build models/tiny.model "$@" --world "$np" -o "$t/t_$name" >/dev/null 2>&1 || fail "$name: shardc build"
  "${mpi[@]}" -np "$np" "$t/t_$name" --data "$t/data.txt" --steps 2 --eval-every 0 --save-to '' </dev/null >"$log" 2>&1 ||
    fail "$name: the trainer failed: $(tail -5 "$log")"
  local line
  line=$(grep '^collectives per step (rank 0' "$log") || fail "$name: no collectives line in $(cat "$log")"
  [[ $line == *": as planned" ]] || fail "$name: $line; $(grep 'warning: rank' "$log")"
  ! grep -q 'differ from the plan\|ran other collectives' "$log" || fail "$name: $(grep 'warning: rank' "$log")"
  local calls bytes
  calls=$(sed -n 's/.*: \([0-9]*\) call(s), \([0-9]*\) bytes.*/\1/p' <<<"$line")
  bytes=$(sed -n 's/.*: \([0-9]*\) call(s), \([0-9]*\) bytes.*/\2/p' <<<"$line")
  local pipeline=0
  grep -q '^# pipeline:' "$plan" && pipeline=1
  if [ $pipeline = 0 ]; then
    local want
    want=$(awk '/^#   total / && $4 != "B" { print $3 }' "$plan")
    [ "$calls" = "$want" ] || fail "$name: rank 0 ran $calls collectives a step, the plan's table says $want"
  fi
  if [ $pipeline = 0 ]; then
    local fl mm model
    fl=$(grep '^matmul FLOPs a step (rank 0' "$log") || fail "$name: no matmul FLOPs line"
    mm=$(sed -n 's/.*counted): \([0-9]*\);.*/\1/p' <<<"$fl")
    model=$(sed -n 's/.*: \([0-9]*\)$/\1/p' <<<"$fl")
    [ -n "$mm" ] && [ $((mm * 8)) = $((model * 7)) ] || fail "$name: $fl (want the matmuls 7/8 of the model FLOPs)"
  fi
  # memory: the plan's classes (exact bytes) against the worst stage's (or rank 0's) tensors
  local p o i total stage=0
  p=$(awk '/^#   parameters /{print $3}' "$plan")
  o=$(awk '/^#   optimizer state /{print $4}' "$plan")
  i=$(awk '/^#   inputs /{print $3}' "$plan")
  total=$(awk '/^#   total  .* B /{print $3}' "$plan")
  if [ $pipeline = 1 ]; then
    stage=$(sed -n 's/^#   planned peak per rank by stage: //p' "$plan" | tr ',' '\n' |
      awk -F': ' '{ v = $2 + 0; if (NR == 1 || v > best) { best = v; s = $1 + 0 } } END { print s }')
  fi
  local held
  if [ $pipeline = 1 ]; then held=$(grep "^tensors held here (rank [0-9]*, stage $stage)" "$log")
  else held=$(grep '^tensors held here (rank 0)' "$log"); fi
  [ -n "$held" ] || fail "$name: no tensors line for stage $stage in $(cat "$log")"
  local hp ho hi ha
  hp=$(sed -n 's/.*: parameters \([0-9]*\) B.*/\1/p' <<<"$held")
  ho=$(sed -n 's/.*optimizer state \([0-9]*\) B.*/\1/p' <<<"$held")
  hi=$(sed -n 's/.*inputs \([0-9]*\) B.*/\1/p' <<<"$held")
  ha=$(sed -n 's/.*the allocation \([0-9]*\) B as planned.*/\1/p' <<<"$held")
  [ "$hp" = "$p" ] || fail "$name: stage $stage holds $hp B of parameters, the plan's class says $p"
  [ "$ho" = "$o" ] || fail "$name: stage $stage holds $ho B of optimizer state, the plan's class says $o"
  [ "$ha" = "$total" ] || fail "$name: the trainer allocates $ha B, the plan's total is $total"
  [ $((i - hi)) -ge 0 ] && [ $((i - hi)) -lt $((64 * 4)) ] ||
    fail "$name: inputs $hi B held, the plan's class $i B (64-byte alignment of 4 inputs at most)"
  printf '%-10s %3s calls %8s B a step as planned; parameters %s B, optimizer state %s B, allocation %s B as planned\n' \
    "$name" "$calls" "$bytes" "$p" "$o" "$total"
}

check z3_accum 2 -D dp=2 -D zero=3 -D batch=32
check tp2_sp 2 -D dp=1 -D tp=2 -D sp=on
check pp2_zb 2 -D dp=1 -D pp=2 -D batch=32 -D schedule=zb
check cp2 2 -D dp=1 -D cp=2
check pp2dp2_z1 4 -D dp=2 -D pp=2 -D batch=64 -D zero=1

# the check fails where the runtime runs other collectives than the plan's
SHARDRT_DP_COMM=member "${mpi[@]}" -np 2 "$t/t_z3_accum" --data "$t/data.txt" --steps 1 --eval-every 0 --save-to '' \
  </dev/null >"$t/member.log" 2>&1 || fail "member: the trainer failed: $(tail -5 "$t/member.log")"
grep -q '^collectives per step (rank 0.*: NOT as planned' "$t/member.log" &&
  grep -q 'warning: rank 1: the collectives of step 1 differ from the plan' "$t/member.log" ||
  fail "SHARDRT_DP_COMM=member (per-member all-reduces) not reported: $(grep -i collectives "$t/member.log")"
echo "per-member all-reduces: reported as not planned ($(grep -o 'dp all_reduce: [^;]*; planned [^;]*' "$t/member.log" | head -1))"
