#!/usr/bin/env bash
# tests/gpu/ncu_sum_test.sh — CI test of tests/gpu/ncu_sum.py, session.sh's ncu part, on ncu CSV it has never
# seen from a GPU (tests/gpu/data/, written after ncu's documented --csv layouts): a 2-step run's log
# (ncu_base.csv) and a 3-step run's (ncu_run.csv: the same 6 launches first, then the third step's 10).
# What the samples hold: ==PROF== and program lines around the CSV, a second metric (dram__bytes.sum)
# interleaved, a header row repeated, kernel names with commas inside quotes (cuBLASLt's splitKreduce
# signature), several launches of one name (k12 three times, splitKreduce and the xmma GEMM twice each),
# two names equal in their first 70 characters (cutlass GemmUniversal ...WarpSpecialized<4, ...> and
# ...Pingpong<2, ...>), values in nsecond, usecond and msecond, with thousands separators ("7,456").
# Made from them here: the same with ncu 2025's short units (ns, us, ms), and both runs followed by two
# validation launches (the trainer's end-of-run validation, as the H100's runs of 2026-11-27 had).
# The sums, by hand, of the third step's launches (rows ID 6..15 of ncu_run.csv):
#   k12            812.45 us + 809.55 us + 0.80 ms          = 2422.000 us, 3 launches
#   xmma GEMM      1.25 ms + 998.00 us                      = 2248.000 us, 2
#   k30            1,234.50 us                              = 1234.500 us, 1
#   cutlass A / B  55.25 us / 44,750 ns                     =   55.250 / 44.750 us, 1 each
#   splitKreduce   7,456 ns + 6.50 us                       =   13.956 us, 2
#   total 6018.456 us = 6.02 ms in 10 launches
# (data/ncu_run.expected holds these lines.) The raw page of the same run (ncu_run_raw.csv: a units row,
# a column per metric) gives the same sums. Refused with a message and exit 1, never guessed: a unit that
# is not time, "n/a", a decimal comma, a base run whose launches are not the run's first, no metric rows.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
sum="$py $here/ncu_sum.py"
d=$here/data
fail=0
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
check() { # check WHAT CONDITION-RESULT
  if [ "$2" = 0 ]; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}

$sum --tsv "$d/ncu_base.csv" "$d/ncu_run.csv" > "$t/details.tsv" 2> "$t/err"
cmp -s "$t/details.tsv" "$d/ncu_run.expected"
check "details page: per-kernel sums of the third step = ncu_run.expected" $?
[ -s "$t/err" ] || true
grep -qx $'k12\t2422.000\t3' "$t/details.tsv"
check "k12: 3 launches summed across nsecond/usecond/msecond" $?
[ "$(grep -c 'cutlass::device_kernel' "$t/details.tsv")" = 2 ]
check "two kernels equal in their first 70 characters stay two lines" $?
$sum --tsv "$d/ncu_base.csv" "$d/ncu_run_raw.csv" > "$t/raw.tsv" 2>> "$t/err"
cmp -s "$t/raw.tsv" "$d/ncu_run.expected"
check "raw page (units row): the same sums" $?
$sum "$d/ncu_base.csv" "$d/ncu_run.csv" > "$t/report.txt"
grep -qx 'kernels of the last step: 6.02 ms in 10 launches (ncu, clocks not locked)' "$t/report.txt"
check "the report's first line: 6.02 ms in 10 launches" $?
# ncu 2025 (CUDA 13, the H100 of 2026-11-27) writes the units short: ns, us, ms
sed 's/"nsecond"/"ns"/; s/"usecond"/"us"/; s/"msecond"/"ms"/' "$d/ncu_base.csv" > "$t/base_short.csv"
sed 's/"nsecond"/"ns"/; s/"usecond"/"us"/; s/"msecond"/"ms"/' "$d/ncu_run.csv" > "$t/run_short.csv"
grep -q '"ns","7,456"' "$t/run_short.csv" && grep -q '"ms","0.80"' "$t/run_short.csv"
check "the short-unit samples hold ns and ms values" $?
$sum --tsv "$t/base_short.csv" "$t/run_short.csv" | cmp -s - "$d/ncu_run.expected"
check "short units (ns, us, ms): the same sums" $?
# both runs validate after their last step (the trainer's end-of-run validation): the base's launches are
# the run's first but for that tail, which is the run's end too; the step between is the third
val() { # val FIRST-ID: two validation launches (kval_fwd 3 us, kval_loss 2 us) with IDs FIRST-ID, FIRST-ID + 1
  local n=$1
  printf '"%d","41877","gpt2_cuda","127.0.0.1","kval_fwd","1","13","(256, 1, 1)","(8, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","3.00"\n' "$n"
  printf '"%d","41877","gpt2_cuda","127.0.0.1","kval_loss","1","13","(256, 1, 1)","(8, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","2.00"\n' "$((n + 1))"
}
{ cat "$d/ncu_base.csv"; val 6; } > "$t/base_val.csv"
{ cat "$d/ncu_run.csv"; val 16; } > "$t/run_val.csv"
$sum --tsv "$t/base_val.csv" "$t/run_val.csv" | cmp -s - "$d/ncu_run.expected"
check "a validation tail after both runs' last step: the third step's sums, the tail left out" $?
n=$($sum --tsv "$t/run_val.csv" | awk -F'\t' '{n += $3} END {print n}')
[ "$n" = 18 ]
check "the tail is read (18 launches without a base: $n)" $?
n=$($sum --tsv "$d/ncu_run.csv" | awk -F'\t' '{n += $3} END {print n}')
[ "$n" = 16 ]
check "without a base: all 16 launches ($n)" $?

refused() { # refused WHAT PATTERN FILES...: exit 1 and a message matching PATTERN
  local what=$1 pat=$2
  shift 2
  $sum "$@" > /dev/null 2> "$t/msg"
  local rc=$?
  [ "$rc" = 1 ] && grep -q "$pat" "$t/msg"
  check "refused: $what ($(head -c 150 "$t/msg"))" $?
}
sed '0,/"usecond","818.02"/s//"cycle","818.02"/' "$d/ncu_run.csv" > "$t/unit.csv"
refused "a unit that is not time" "unit 'cycle'" "$t/unit.csv"
sed 's/"usecond","1,234.50"/"usecond","n\/a"/' "$d/ncu_run.csv" > "$t/na.csv"
refused "n/a" "not a number" "$t/na.csv"
sed 's/"usecond","6.50"/"usecond","6,50"/' "$d/ncu_run.csv" > "$t/comma.csv"
refused "a decimal comma" "not a number" "$t/comma.csv"
sed '0,/"k30"/s//"k31"/' "$d/ncu_base.csv" > "$t/other.csv"
refused "a base run of another launch sequence" "different sequences" "$t/other.csv" "$d/ncu_run.csv"
refused "a base whose tail is not the run's end" "different sequences" "$t/base_val.csv" "$d/ncu_run.csv"
refused "a base no shorter than the run" "no step past the base" "$d/ncu_run.csv" "$d/ncu_run.csv"
grep -v gpu__time_duration "$d/ncu_run.csv" > "$t/none.csv"
refused "no gpu__time_duration.sum rows" "no gpu__time_duration.sum values" "$t/none.csv"
printf 'no csv here\n' > "$t/empty.csv"
refused "no CSV at all" "no CSV rows" "$t/empty.csv"
exit $fail
