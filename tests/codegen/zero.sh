#!/usr/bin/env bash
# ZeRO (passes/zero.c) under mpirun: the compiled multi-rank trainer equals the single-rank one
# (labels mpi, e2e).
#
#   zero.sh SHARDC   the tiny GPT (seq 32) under zero 1 with dp=2 and dp=2 x tp=2: 20 AdamW steps
#                    give the single-rank loss curve (1e-5 relative per step, the tolerance of
#                    layouts.sh, which justifies it); checkpoints stay logical: a zero-1 dp=2
#                    checkpoint at step 10 resumes under zero 0 (dp=2) and on one rank, and a
#                    zero-0 dp=2 checkpoint resumes under zero 1, each with the uninterrupted
#                    run's step-11 loss (1e-5 relative)
set -euo pipefail
shardc=$(realpath "$1")
cd "$(dirname "$0")/../.."
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh

m=(models/tiny.model -D seq=32)
"$shardc" build "${m[@]}" -D micro_batch=8 --world 1 -o "$t/one"
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=1 --world 2 -o "$t/dp2"
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=1 -D zero=1 --world 2 -o "$t/z1dp2"
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=2 -D zero=1 --world 4 -o "$t/z1dp2tp2"
# the program is a ZeRO one: the optimizer state is split over dp and the parameters gathered
"$shardc" plan "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=1 -D zero=1 --world 2 --dump-ir >"$t/z1.ir" 2>&1
grep -q 'state  "adam_m:wte"' "$t/z1.ir" && grep 'state  "adam_m:wte"' "$t/z1.ir" | grep -q 'S(dp)' ||
  { echo "FAIL: zero 1 left adam_m:wte whole"; exit 1; }
ng=$(grep -c "all_gather(.*over=dp" "$t/z1.ir" || true)
[ "$ng" -gt 0 ] || { echo "FAIL: zero 1 gathers no parameter"; exit 1; }
echo "zero 1 dp2: $ng parameter all-gathers over dp"
"$t/one" "${run[@]}" --threads 2 --log "$t/one.jsonl" >/dev/null
for c in z1dp2:2 z1dp2tp2:4; do
  n=${c%%:*}
  "${mpi[@]}" -np "${c#*:}" "$t/$n" "${run[@]}" --log "$t/$n.jsonl" >/dev/null
  compare "$n" "$t/$n.jsonl" "$t/one.jsonl"
done
# checkpoints across stages: zero 1 -> zero 0 and one rank; zero 0 -> zero 1
"${mpi[@]}" -np 2 "$t/z1dp2" "${run[@]}" --stop-at 10 --save-to "$t/ck_z1" >/dev/null
"${mpi[@]}" -np 2 "$t/dp2" "${run[@]}" --stop-at 10 --save-to "$t/ck_z0" >/dev/null
want=$(losses "$t/z1dp2.jsonl" | sed -n 11p)
"${mpi[@]}" -np 2 "$t/dp2" "${run[@]}" --resume "$t/ck_z1" --stop-at 11 --log "$t/r_z0.jsonl" --save-to "$t/ck_a" >/dev/null
"$t/one" "${run[@]}" --threads 2 --resume "$t/ck_z1" --stop-at 11 --log "$t/r_one.jsonl" --save-to "$t/ck_b" >/dev/null
"${mpi[@]}" -np 2 "$t/z1dp2" "${run[@]}" --resume "$t/ck_z0" --stop-at 11 --log "$t/r_z1.jsonl" --save-to "$t/ck_c" >/dev/null
for r in r_z0 r_one r_z1; do
  got=$(losses "$t/$r.jsonl" | head -1)
  awk -v a="$got" -v b="$want" -v n="$r" 'BEGIN { d = a - b; if (d < 0) d = -d;
    printf "resume step 10 -> %-6s step 11 loss %s vs %s uninterrupted zero 1 (|rel| %.1e)\n", n, a, b, d / b;
    exit (d / b <= 1e-5 ? 0 : 1) }' || { echo "FAIL: resumed $r"; exit 1; }
done
echo "zero: ok"
