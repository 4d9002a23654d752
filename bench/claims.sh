#!/usr/bin/env bash
# bench/claims.sh — the plan's claims against the CPU trainer on tiny (docs/performance.md "Claims against
# runs (session 33 audit)").
#   table:  per layout (30: dp, tp, sp, pp gpipe/1f1b/zb/interleaved, cp ring/all2all, ZeRO 1-3, recompute,
#           accumulation, bf16, 4-rank mixes), plan then build then 3 steps under mpirun: one markdown row of
#           the collectives (rank 0's calls and bytes, "=" when every rank's equal its stage's in the plan), the
#           plan's parameters / optimizer state / total against the held tensors of its worst stage, the
#           rank's own resident growth (MiB) and the counted matmul FLOPs against the model's per rank.
#   search: six `plan --search` candidates of tiny on cpu.topo, predicted (--cost) and run 30 steps, 3 rounds.
# Usage: bench/claims.sh SHARDC table|search   (from the repository root; needs mpirun; a few minutes)
set -uo pipefail
shardc=$(realpath "${1:?usage: claims.sh SHARDC table|search}")
what=${2:?usage: claims.sh SHARDC table|search}
root=$(cd "$(dirname "$0")/.." && pwd)
M=$root/models/tiny.model
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
cd "$t" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
bash "$root/scripts/gen_corpus.sh" corpus.txt 200000 3 >/dev/null

layouts() {
  cat <<'L'
dp2 2 -D dp=2
tp2 2 -D dp=1 -D tp=2
tp2sp 2 -D dp=1 -D tp=2 -D sp=on
pp2_1f1b 2 -D dp=1 -D pp=2 -D batch=32 -D schedule=1f1b
pp2_gpipe 2 -D dp=1 -D pp=2 -D batch=32 -D schedule=gpipe
pp2_zb 2 -D dp=1 -D pp=2 -D batch=32 -D schedule=zb
pp2_il 2 -D dp=1 -D pp=2 -D batch=32 -D layers=4 -D schedule=interleaved
cp2 2 -D dp=1 -D cp=2
cp2_a2a 2 -D dp=1 -D cp=2 -D cp_mode=all2all
z1 2 -D dp=2 -D zero=1
z2 2 -D dp=2 -D zero=2
z3 2 -D dp=2 -D zero=3
rc_full 2 -D dp=2 -D recompute=full
rc_sel 2 -D dp=2 -D recompute=selective
accum2 2 -D dp=2 -D batch=32
bf16 2 -D dp=2 -D precision=bf16
bf16_z3 2 -D dp=2 -D precision=bf16 -D zero=3
dp2tp2 4 -D dp=2 -D tp=2
dp2tp2sp 4 -D dp=2 -D tp=2 -D sp=on
pp2dp2_z1 4 -D dp=2 -D pp=2 -D batch=64 -D zero=1
pp2tp2 4 -D dp=1 -D tp=2 -D pp=2 -D batch=32
cp2dp2_z3 4 -D dp=2 -D cp=2 -D zero=3
cp2tp2 4 -D dp=1 -D cp=2 -D tp=2
z2_accum 2 -D dp=2 -D zero=2 -D batch=32
z3_rc 2 -D dp=2 -D zero=3 -D recompute=full -D batch=32
pp2_zb_z3 4 -D dp=2 -D pp=2 -D zero=3 -D batch=64 -D schedule=zb
pp2_il_z2 4 -D dp=2 -D pp=2 -D batch=64 -D layers=4 -D schedule=interleaved -D zero=2
pp2_zb_rc 2 -D dp=1 -D pp=2 -D batch=32 -D schedule=zb -D recompute=selective
tp2sp_bf16 2 -D dp=1 -D tp=2 -D sp=on -D precision=bf16
cp2_bf16 2 -D dp=1 -D cp=2 -D precision=bf16
L
}

table() {
  local name np defs
  while read -r name np defs; do
    # shellcheck disable=SC2086
    "$shardc" plan "$M" $defs --world "$np" --bytes >"p_$name.txt" 2>&1
    # shellcheck disable=SC2086
    "$shardc" build "$M" $defs --world "$np" -o "t_$name" >/dev/null 2>&1 || { echo "| $name | build failed |"; continue; }
    mpirun -np "$np" "./t_$name" --data corpus.txt --steps 3 --eval-every 0 --save-to '' </dev/null >"r_$name.log" 2>&1
    local line calls bytes verdict p o tot st held hp ho ha ws mem end hwm base peer own fl mm model ratio
    line=$(grep '^collectives per step' "r_$name.log")
    calls=$(sed -n 's/.*: \([0-9]*\) call(s), \([0-9]*\) bytes.*/\1/p' <<<"$line")
    bytes=$(sed -n 's/.*call(s), \([0-9]*\) bytes.*/\1/p' <<<"$line")
    verdict=$(grep -q ': as planned' <<<"$line" && ! grep -q 'differ from the plan' "r_$name.log" && echo "= on every rank" || echo "DIFFERS")
    p=$(awk '/^#   parameters /{print $3}' "p_$name.txt")
    o=$(awk '/^#   optimizer state /{print $4}' "p_$name.txt")
    tot=$(awk '/^#   total  .* B /{print $3}' "p_$name.txt")
    if grep -q '^# pipeline:' "p_$name.txt"; then
      st=$(sed -n 's/^#   planned peak per rank by stage: //p' "p_$name.txt" | tr ',' '\n' |
        awk -F': ' '{ v = $2 + 0; if (NR == 1 || v > b) { b = v; s = $1 + 0 } } END { print s }')
      held=$(grep "^tensors held here (rank [0-9]*, stage $st)" "r_$name.log")
    else
      held=$(grep '^tensors held here (rank 0)' "r_$name.log")
      st=-
    fi
    hp=$(sed -n 's/.*: parameters \([0-9]*\) B.*/\1/p' <<<"$held")
    ho=$(sed -n 's/.*optimizer state \([0-9]*\) B.*/\1/p' <<<"$held")
    ha=$(sed -n 's/.*the allocation \([0-9]*\) B as planned.*/\1/p' <<<"$held")
    ws=$(sed -n 's/.*(+ \([0-9]*\) B kernel workspace).*/\1/p' <<<"$held")
    mem=$([ "$hp" = "$p" ] && [ "$ho" = "$o" ] && [ "$ha" = "$tot" ] && echo "=" || echo "DIFFERS: $hp/$ho/$ha")
    end=$(grep '^memory at end' "r_$name.log")
    hwm=$(sed -n 's/.*measured peak resident \([0-9.]*\) MiB.*/\1/p' <<<"$end")
    base=$(sed -n 's/.*; \([0-9.]*\) MiB resident before.*/\1/p' <<<"$end")
    peer=$(sed -n 's/.*; \([0-9.]*\) \(KiB\|MiB\) of it the local peers.*/\1 \2/p' <<<"$end" | awk '{ print ($2 == "KiB" ? $1 / 1024 : $1) }')
    own=$(awk -v h="$hwm" -v b="$base" -v p="${peer:-0}" -v t="$tot" -v w="$ws" 'BEGIN { printf "%+.2f", h - b - p - (t + w) / 1048576 }')
    fl=$(grep '^matmul FLOPs' "r_$name.log")
    mm=$(sed -n 's/.*counted): \([0-9]*\);.*/\1/p' <<<"$fl")
    model=$(sed -n 's/.*: \([0-9]*\)$/\1/p' <<<"$fl")
    ratio=$(awk -v a="$mm" -v b="$model" 'BEGIN { printf "%.4f", a / b }')
    echo "| $name | $np | ${defs//-D /} | $calls | $bytes | $verdict | $p | $o | $st | $tot | $mem | $own | $mm | $ratio |"
  done < <(layouts)
}

search() {
  local names=(A_dp2_z0_mb8 B_tp2sp_sel_mb16 C_dp2_full_mb4 D_cp2_mb16 E_pp2zb_sel_mb8 F_cp2_sel_mb4)
  local defs=("-D dp=2 -D tp=1 -D zero=0 -D recompute=none -D micro_batch=8"
    "-D dp=1 -D tp=2 -D sp=on -D zero=0 -D recompute=selective -D micro_batch=16"
    "-D dp=2 -D tp=1 -D zero=0 -D recompute=full -D micro_batch=4 -D batch=16"
    "-D dp=1 -D cp=2 -D zero=0 -D recompute=none -D micro_batch=16"
    "-D dp=1 -D pp=2 -D schedule=zb -D zero=0 -D recompute=selective -D micro_batch=8 -D batch=16"
    "-D dp=1 -D cp=2 -D zero=0 -D recompute=selective -D micro_batch=4 -D batch=16")
  local i rep ms
  for i in "${!names[@]}"; do
    # shellcheck disable=SC2086
    "$shardc" plan "$M" ${defs[$i]} --world 2 --cost 2>&1 | grep -m1 '^#   step  ' | sed 's/^#   /predicted /; s/  */ /g' >"pred_$i"
    # shellcheck disable=SC2086
    "$shardc" build "$M" ${defs[$i]} --world 2 -o "s_$i" >/dev/null 2>&1 || echo "${names[$i]}: build failed"
  done
  for rep in 1 2 3; do
    for i in "${!names[@]}"; do
      ms=$(mpirun -np 2 "./s_$i" --data corpus.txt --steps 30 --eval-every 0 --save-to '' </dev/null 2>&1 |
        sed -n 's/.*; \([0-9.]*\) ms\/step.*/\1/p')
      echo "$rep ${names[$i]} measured $ms ms/step | $(cat "pred_$i") | load $(cut -d' ' -f1 /proc/loadavg)"
    done
  done
}

case $what in
table) table ;;
search) search ;;
*) echo "usage: claims.sh SHARDC table|search" >&2; exit 2 ;;
esac
