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
#   FLOPs: every rank's matmul FLOPs a step (counted in rt_matmul_*) are its stage's in the plan (the cost model's
#     matmul nodes, RtProgram.gemm_flop_plan: "as planned", no rank warning); without pp they are 7/8 of the plan's model
#     FLOPs per rank (tiny: attention is 32768 of the 262144 a token), so the FLOPs per token the trainer's MFU
#     divides by are the model's (pp x dp had 2.56x them: ir/flops.c, tests/report/flops.sh).
#   kernel calls: every rank counts its step's kernel calls by class where the generated code makes them
#     (runtime/ops/kern_count.h, codegen/emit_kcount.c) and checks them against its stage's in the plan (the cost
#     model's count, RtProgram.kern_plan): "as planned", no rank warning; rank 0's GEMM and attention calls and
#     (without pp) its total are the `--cost` line's (the busiest stage's under pp). The C kernels (--cpu-kernels c)
#     on the five layouts; the default LLVM kernels (a fusion group one call, a norm's backward three: the cost
#     model counts what passes/cost_llvm.c says they run) on dp 2, tp 2 + sp, pp 2 1f1b and recompute full; two
#     layouts on the emulated CUDA device.
#   and the checks can fail: with one all-reduce per bucket member (SHARDRT_DP_COMM=member) the collectives
#     differ from the plan, with a kernel call more (SHARDRT_FAULT_KCALL) the kernel calls, and the trainer says so.
# Usage: tests/codegen/claims.sh SHARDC
set -euo pipefail
shardc=$(realpath "$1")
cd "$(dirname "$0")/../.."
# shellcheck source=tests/lib.sh
source tests/lib.sh
corpus 40000

# kernels NAME PLAN LOG: rank 0's kernel calls as planned on every rank and, without pp, its GEMM and attention
# calls and its total the --cost lines' (under pp those are the busiest stage's, each rank checks its own stage's);
# prints rank 0's calls, or why not (status 1)
kernels() {
  local name=$1 plan=$2 log=$3 line want
  line=$(grep '^kernel calls per step (rank 0' "$log") || { echo "$name: no kernel calls line in $(cat "$log")"; return 1; }
  [[ $line == *": as planned" ]] || { echo "$name: $line; $(grep 'warning: rank' "$log")"; return 1; }
  ! grep -q 'kernel calls of step .* differ\|ran other kernel calls' "$log" || { echo "$name: $(grep 'warning: rank' "$log")"; return 1; }
  if ! grep -q '^# pipeline:' "$plan"; then
    want=$(sed -n 's/^#   kernel calls   GEMM \([0-9]*\), attention \([0-9]*\), .*/(GEMM \1, attention \2, /p' "$plan")
    [ -n "$want" ] && [[ $line == *"$want"* ]] || { echo "$name: $line; the plan's --cost: $(grep '^#   kernel calls' "$plan")"; return 1; }
    want=$(sed -n 's/^#   compute .*, \([0-9]*\) kernel calls .*/\1/p' "$plan")
    [[ $line == *"): $want ("* ]] || { echo "$name: $line; the plan's --cost counts $want"; return 1; }
  fi
  sed -n 's/^kernel calls per step (rank 0, step 1): \(.*\): as planned/\1/p' <<<"$line"
}

# flops NAME LOG: the matmul FLOPs every rank counted in its first step are its stage's in the plan (rank 0 says
# "as planned", no rank warns)
flops() {
  grep -q '^matmul FLOPs a step (rank 0, step 1, counted): [0-9]* (as planned); ' "$2" &&
    ! grep -q 'matmul FLOPs of step .* differ' "$2" ||
    fail "$1: matmul FLOPs not as planned: $(grep -h 'matmul FLOPs' "$2")"
}

# check NAME NP DEFINES...
check() {
  local name=$1 np=$2 plan="$t/$1.plan" log="$t/$1.log"
  shift 2
  "$shardc" plan models/tiny.model "$@" --world "$np" --cpu-kernels c --bytes --cost >"$plan" 2>&1 ||
    fail "$name: shardc plan: $(tail -3 "$plan")"
  "$shardc" build models/tiny.model "$@" --world "$np" --cpu-kernels c -o "$t/t_$name" >/dev/null 2>&1 || fail "$name: shardc build"
  "${mpi[@]}" -np "$np" "$t/t_$name" --data "$t/data.txt" --steps 2 --eval-every 0 --save-to '' </dev/null >"$log" 2>&1 ||
    fail "$name: the trainer failed: $(tail -5 "$log")"
  local kc
  kc=$(kernels "$name" "$plan" "$log") || fail "$kc"
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
  flops "$name" "$log"
  if [ $pipeline = 0 ]; then
    local fl mm model
    fl=$(grep '^matmul FLOPs a step (rank 0' "$log") || fail "$name: no matmul FLOPs line"
    mm=$(sed -n 's/.*counted): \([0-9]*\) (as planned);.*/\1/p' <<<"$fl")
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
  printf '%-10s %3s calls %8s B a step as planned; parameters %s B, optimizer state %s B, allocation %s B as planned; kernel calls %s as planned\n' \
    "$name" "$calls" "$bytes" "$p" "$o" "$total" "$kc"
}

# kernels_only NAME KERNELS NP DEFINES...: the kernel calls alone, the CPU kernels KERNELS (c or llvm) in the plan
# and the trainer
kernels_only() {
  local name=$1 kern=$2 np=$3 plan="$t/$1.plan" log="$t/$1.log"
  shift 3
  "$shardc" plan models/tiny.model "$@" --world "$np" --cpu-kernels "$kern" --cost >"$plan" 2>&1 ||
    fail "$name: shardc plan: $(tail -3 "$plan")"
  "$shardc" build models/tiny.model "$@" --world "$np" --cpu-kernels "$kern" -o "$t/t_$name" >/dev/null 2>&1 ||
    fail "$name: shardc build"
  "${mpi[@]}" -np "$np" "$t/t_$name" --data "$t/data.txt" --steps 2 --eval-every 0 --save-to '' </dev/null >"$log" 2>&1 ||
    fail "$name: the trainer failed: $(tail -5 "$log")"
  local kc
  kc=$(kernels "$name" "$plan" "$log") || fail "$kc"
  flops "$name" "$log"
  printf '%-10s kernel calls %s and matmul FLOPs as planned (%s kernels)\n' "$name" "$kc" "$kern"
}

check z3_accum 2 -D dp=2 -D zero=3 -D batch=32
check tp2_sp 2 -D dp=1 -D tp=2 -D sp=on
check pp2_zb 2 -D dp=1 -D pp=2 -D batch=32 -D schedule=zb
check cp2 2 -D dp=1 -D cp=2
check pp2dp2_z1 4 -D dp=2 -D pp=2 -D batch=64 -D zero=1

# the LLVM kernels (the default where LLVM builds); the C kernels' count differs (125 against 122 on dp 2)
kernels_only dp2_llvm llvm 2 -D dp=2
grep -q '^#   kernel calls   GEMM 27, attention 4, bandwidth-bound 91 ' "$t/dp2_llvm.plan" ||
  fail "dp2_llvm: the plan's LLVM kernel calls: $(grep '^#   kernel calls' "$t/dp2_llvm.plan")"
kernels_only tp2sp_llvm llvm 2 -D dp=1 -D tp=2 -D sp=on
kernels_only pp2_1f1b llvm 2 -D dp=1 -D pp=2 -D batch=32 -D schedule=1f1b
kernels_only dp2_rc llvm 2 -D dp=2 -D recompute=full

# the CUDA target on the emulated device (its launches and GEMMs): ZeRO-3 (its gathers' slices: copies, no kernel),
# pp 2 zb
for c in "cu_z3 -D dp=2 -D zero=3" "cu_pp2 -D dp=1 -D pp=2 -D batch=32 -D schedule=zb"; do
  set -- $c
  name=$1
  shift
  "$shardc" plan models/tiny.model "$@" --world 2 --target cuda --cost >"$t/$name.plan" 2>&1 || fail "$name: shardc plan"
  "$shardc" build models/tiny.model "$@" --world 2 --target cuda -o "$t/t_$name" >/dev/null 2>&1 || fail "$name: shardc build"
  SHARDRT_DEVICE=emu "${mpi[@]}" -x SHARDRT_DEVICE -np 2 "$t/t_$name" --data "$t/data.txt" --steps 2 --eval-every 0 \
    --save-to '' </dev/null >"$t/$name.log" 2>&1 || fail "$name: the trainer failed: $(tail -5 "$t/$name.log")"
  kc=$(kernels "$name" "$t/$name.plan" "$t/$name.log") || fail "$kc"
  printf '%-10s kernel calls %s as planned (emulated device)\n' "$name" "$kc"
done

# a kernel call more than the plan's, on rank 1: reported by rank 1 alone, its class and counts
SHARDRT_FAULT_KCALL=1:attention:1 "${mpi[@]}" -x SHARDRT_FAULT_KCALL -np 2 "$t/t_z3_accum" --data "$t/data.txt" --steps 1 \
  --eval-every 0 --save-to '' </dev/null >"$t/kcall.log" 2>&1 || fail "kcall: the trainer failed: $(tail -5 "$t/kcall.log")"
grep -q '^kernel calls per step (rank 0.*: as planned' "$t/kcall.log" &&
  grep -q 'warning: rank 1: the kernel calls of step 1 differ from the plan (pipeline stage 0): attention: 9 call(s), planned 8$' "$t/kcall.log" &&
  ! grep -q 'warning: rank 0: the kernel calls' "$t/kcall.log" ||
  fail "SHARDRT_FAULT_KCALL=1:attention:1 not reported: $(grep -i 'kernel calls' "$t/kcall.log")"
SHARDRT_FAULT_KCALL=1:GEMM "${mpi[@]}" -x SHARDRT_FAULT_KCALL -np 2 "$t/t_z3_accum" --data "$t/data.txt" --steps 1 \
  --eval-every 0 --save-to '' </dev/null >"$t/kcall0.log" 2>&1 || fail "kcall0: the trainer failed"
grep -q '^kernel calls per step (rank 0.*: NOT as planned' "$t/kcall0.log" || fail "SHARDRT_FAULT_KCALL=1:GEMM on rank 0: $(grep -i 'kernel calls' "$t/kcall0.log")"
SHARDRT_FAULT_KCALL=1:gemm "${mpi[@]}" -x SHARDRT_FAULT_KCALL -np 2 "$t/t_z3_accum" --data "$t/data.txt" --steps 1 \
  --eval-every 0 --save-to '' </dev/null >"$t/kbad.log" 2>&1 && fail "SHARDRT_FAULT_KCALL=1:gemm (no such class) was accepted"
grep -q "SHARDRT_FAULT_KCALL='1:gemm': expected STEP:CLASS\[:RANK\], CLASS one of GEMM, attention, bandwidth-bound" "$t/kbad.log" ||
  fail "SHARDRT_FAULT_KCALL=1:gemm: $(tail -3 "$t/kbad.log")"
echo "a kernel call more: reported ($(grep -o 'attention: 9 call(s), planned 8' "$t/kcall.log"), on rank 1 only)"

# two matmul FLOPs more than the plan's on rank 1: reported by rank 1 alone
SHARDRT_FAULT_FLOPS=1:1 "${mpi[@]}" -x SHARDRT_FAULT_FLOPS -np 2 "$t/t_z3_accum" --data "$t/data.txt" --steps 1 \
  --eval-every 0 --save-to '' </dev/null >"$t/flops.log" 2>&1 || fail "flops: the trainer failed: $(tail -5 "$t/flops.log")"
grep -q '^matmul FLOPs a step (rank 0, step 1, counted): [0-9]* (as planned)' "$t/flops.log" &&
  grep -q 'warning: rank 1: the matmul FLOPs of step 1 differ from the plan (pipeline stage 0): [0-9]* counted, planned [0-9]*$' "$t/flops.log" &&
  ! grep -q 'warning: rank 0: the matmul FLOPs' "$t/flops.log" ||
  fail "SHARDRT_FAULT_FLOPS=1:1 not reported: $(grep -i 'matmul FLOPs' "$t/flops.log")"
SHARDRT_FAULT_FLOPS=1 "${mpi[@]}" -x SHARDRT_FAULT_FLOPS -np 2 "$t/t_z3_accum" --data "$t/data.txt" --steps 1 \
  --eval-every 0 --save-to '' </dev/null >"$t/flops0.log" 2>&1 || fail "flops0: the trainer failed"
grep -q '^matmul FLOPs a step (rank 0, step 1, counted): [0-9]* (NOT as planned: the plan.s [0-9]*)' "$t/flops0.log" ||
  fail "SHARDRT_FAULT_FLOPS=1 on rank 0: $(grep -i 'matmul FLOPs' "$t/flops0.log")"
echo "two matmul FLOPs more: reported ($(grep -o 'rank 1: the matmul FLOPs.*' "$t/flops.log"))"

# the check fails where the runtime runs other collectives than the plan's
SHARDRT_DP_COMM=member "${mpi[@]}" -np 2 "$t/t_z3_accum" --data "$t/data.txt" --steps 1 --eval-every 0 --save-to '' \
  </dev/null >"$t/member.log" 2>&1 || fail "member: the trainer failed: $(tail -5 "$t/member.log")"
grep -q '^collectives per step (rank 0.*: NOT as planned' "$t/member.log" &&
  grep -q 'warning: rank 1: the collectives of step 1 differ from the plan' "$t/member.log" ||
  fail "SHARDRT_DP_COMM=member (per-member all-reduces) not reported: $(grep -i collectives "$t/member.log")"
echo "per-member all-reduces: reported as not planned ($(grep -o 'dp all_reduce: [^;]*; planned [^;]*' "$t/member.log" | head -1))"
