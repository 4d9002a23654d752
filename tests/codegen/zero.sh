#!/usr/bin/env bash
# ZeRO (passes/zero.c) under mpirun: the compiled multi-rank trainer equals the single-rank one
# (labels mpi, e2e).
#
#   zero.sh SHARDC   the tiny GPT (seq 32) under zero 1, 2 and 3 with dp=2 and dp=2 x tp=2 (and zero 2 / 3
#                    with `coalesce on`, passes/zero_coalesce.c): 20 AdamW steps
#                    give the single-rank loss curve (1e-5 relative per step, the tolerance of
#                    layouts.sh, which justifies it); checkpoints stay logical: a zero-1 dp=2
#                    checkpoint at step 10 resumes under zero 0 (dp=2) and on one rank, a zero-0
#                    dp=2 checkpoint under zero 1, 2 and 3 and a one-rank (logical) checkpoint under
#                    zero 1 (its layers' state split over dp), each with the uninterrupted
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
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=1 -D zero=2 --world 2 -o "$t/z2dp2"
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=2 -D zero=2 --world 4 -o "$t/z2dp2tp2"
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=1 -D zero=3 --world 2 -o "$t/z3dp2"
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=2 -D zero=3 --world 4 -o "$t/z3dp2tp2"
# a layer's gathers coalesced into one (passes/zero_coalesce.c; z3dp2tp2 coalesces by the cost model
# already, its row-split tensors transposed when unpacked; at dp 2 x tp 1 the model says no: `on` here)
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=1 -D zero=3 -D coalesce=on --world 2 -o "$t/z3cdp2"
# and a layer's gradients' reduce-scatters into one (at dp 2 x tp 2 the row-split ones transposed when
# packed; the model says no there: `on`)
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=2 -D zero=3 -D coalesce=on --world 4 -o "$t/z3cdp2tp2"
# ZeRO-2's the same way (its parameters whole: the scatters alone)
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=2 -D zero=2 -D coalesce=on --world 4 -o "$t/z2cdp2tp2"
# the program is a ZeRO one: the optimizer state is split over dp and the parameters gathered
"$shardc" plan "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=1 -D zero=1 --world 2 --dump-ir >"$t/z1.ir" 2>&1
grep -q 'state  "adam_m:wte"' "$t/z1.ir" && grep 'state  "adam_m:wte"' "$t/z1.ir" | grep -q 'S(dp)' ||
  { echo "FAIL: zero 1 left adam_m:wte whole"; exit 1; }
ng=$(grep -c "all_gather(.*over=dp" "$t/z1.ir" || true)
[ "$ng" -gt 0 ] || { echo "FAIL: zero 1 gathers no parameter"; exit 1; }
echo "zero 1 dp2: $ng parameter all-gathers over dp"
"$shardc" plan "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=1 -D zero=2 --world 2 --dump-ir >"$t/z2.ir" 2>&1
ns=$(grep -c "reduce_scatter(.*over=dp" "$t/z2.ir" || true)
nr=$(grep -c "all_reduce(.*over=dp" "$t/z2.ir" || true)
[ "$ns" -gt 0 ] || { echo "FAIL: zero 2 reduce-scatters no gradient"; exit 1; }
# in buckets (passes/zero.c, bucket_scatters): fewer collectives than gradients
ngr=$(grep -c 'state  "adam_m:' "$t/z2.ir" || true)
[ "$ns" -lt "$ngr" ] || { echo "FAIL: zero 2: $ns reduce-scatters for $ngr gradients, not bucketed"; exit 1; }
echo "zero 2 dp2: $ns gradient reduce-scatters over dp for $ngr gradients (bucketed), $nr all-reduces over dp (the loss's, the clip's)"
"$shardc" plan "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=1 -D zero=3 --world 2 --dump-ir >"$t/z3.ir" 2>&1
np=$(grep -c 'S(dp)[^=]*= param' "$t/z3.ir" || true)
nl=$(grep -c '^    .*all_gather(.*over=dp' "$t/z3.ir" || true)
[ "$np" -gt 0 ] && [ "$nl" -gt 0 ] || { echo "FAIL: zero 3 splits no parameter or gathers none in the loops"; exit 1; }
echo "zero 3 dp2: $np parameters stored split over dp, $nl all-gathers inside the layer loops"
# ... started asynchronously at the front of each iteration, waited before their first reader
"$shardc" plan "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=1 -D zero=3 --world 2 --emit-c "$t/z3src" >/dev/null 2>&1
na=$(grep -c "rt_coll_all_gather_start(" "$t/z3src/tiny.c" || true)
[ "$na" -ge "$nl" ] || { echo "FAIL: zero 3: $na asynchronous all-gathers, want at least the $nl in the loops"; exit 1; }
echo "zero 3 dp2: $na asynchronous parameter all-gathers"
"$shardc" plan "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=1 -D zero=3 -D coalesce=on --world 2 --dump-ir >"$t/z3c.ir" 2>&1
nc=$(grep -c '^    .*all_gather(.*over=dp' "$t/z3c.ir" || true)
nloops=$(grep -c '^  .*= repeat ' "$t/z3c.ir" || true)
[ "$nc" -ge 1 ] && [ "$nc" -le "$nloops" ] ||
  { echo "FAIL: zero 3 coalesce on: $nc all-gathers inside the $nloops layer loops, want one a loop"; exit 1; }
echo "zero 3 dp2 coalesce on: (before: $nl) $nc all-gathers inside the $nloops layer loops"
for z in 3 2; do
  for c in off on; do
    "$shardc" plan "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=2 -D zero=$z -D coalesce=$c --world 4 --dump-ir >"$t/z${z}rs$c.ir" 2>&1
  done
  rs_off=$(grep -c '^    .*reduce_scatter(.*over=dp' "$t/z${z}rsoff.ir" || true)
  rs_on=$(grep -c '^    .*reduce_scatter(.*over=dp' "$t/z${z}rson.ir" || true)
  [ "$rs_on" -eq 1 ] && [ "$rs_off" -gt 1 ] ||
    { echo "FAIL: zero $z dp2 tp2: $rs_on dp reduce-scatters in the backward loop with coalesce on (want 1), $rs_off off (want > 1)"; exit 1; }
  echo "zero $z dp2 tp2 coalesce on: $rs_on dp reduce-scatter in the backward loop (off: $rs_off)"
done
"$t/one" "${run[@]}" --threads 2 --log "$t/one.jsonl" >/dev/null
for c in z1dp2:2 z1dp2tp2:4 z2dp2:2 z2dp2tp2:4 z2cdp2tp2:4 z3dp2:2 z3dp2tp2:4 z3cdp2:2 z3cdp2tp2:4; do
  n=${c%%:*}
  "${mpi[@]}" -np "${c#*:}" "$t/$n" "${run[@]}" --log "$t/$n.jsonl" >/dev/null
  compare "$n" "$t/$n.jsonl" "$t/one.jsonl"
done
# memory after start (docs/memory.md, "What the plan does not count"): zero 1, dp=2, the GPT widened
# (d=256: 42 MiB of plan), 5 steps: rank 0's peak resident size at the end, less the peer's memory
# mapped here (its parameters and gradients, read in place from the first step on: 13 MiB of the
# peer's pages, resident in its own VmHWM), is within 4 MiB of the size at start (the plan allocated
# and touched; measured +1.15 MiB: malloc's heap, library and data file pages; 13.9 MiB with the peer's)
"$shardc" build models/tiny.model -D d=256 -D layers=4 -D seq=32 -D micro_batch=2 -D dp=2 -D tp=1 -D zero=1 \
  --world 2 -o "$t/z1mem"
"${mpi[@]}" -np 2 "$t/z1mem" --data "$t/data.txt" --steps 5 --eval-every 0 --val-batches 1 >"$t/z1mem.out"
mib_of() { # the figure in MiB inside the match of "$2" in the "memory at $1:" line
  grep -m1 "^memory at $1:" "$t/z1mem.out" | grep -o "$2" | grep -o '[0-9.]* [KMG]iB' |
    awk '{ print $2 == "KiB" ? $1 / 1024 : $2 == "GiB" ? $1 * 1024 : $1 }'
}
s=$(mib_of start 'resident [0-9.]* [KMG]iB (VmHWM)') e=$(mib_of end 'resident [0-9.]* [KMG]iB (VmHWM)')
ps=$(mib_of start '[0-9.]* [KMG]iB of it the local peers') pe=$(mib_of end '[0-9.]* [KMG]iB of it the local peers')
awk -v s="$s" -v e="$e" -v ps="${ps:-0}" -v pe="${pe:-0}" 'BEGIN { g = (e - pe) - (s - ps);
  printf "zero 1 dp2 memory: VmHWM %.1f MiB at start, %.1f at end, %.1f of it the peer'"'"'s: own growth %.2f MiB (bound 4)\n", s, e, pe, g;
  exit (s > 0 && e > 0 && g < 4 ? 0 : 1) }' || { echo "FAIL: zero 1 dp2: the resident size grows after start"; exit 1; }
# checkpoints across stages: zero 1 and zero 2 -> zero 0 (and zero 2 -> one rank); zero 0 -> zero 1 and 2
"${mpi[@]}" -np 2 "$t/z1dp2" "${run[@]}" --stop-at 10 --save-to "$t/ck_z1" >/dev/null
"${mpi[@]}" -np 2 "$t/z2dp2" "${run[@]}" --stop-at 10 --save-to "$t/ck_z2" >/dev/null
"${mpi[@]}" -np 2 "$t/z3dp2" "${run[@]}" --stop-at 10 --save-to "$t/ck_z3" >/dev/null
"${mpi[@]}" -np 2 "$t/dp2" "${run[@]}" --stop-at 10 --save-to "$t/ck_z0" >/dev/null
"$t/one" "${run[@]}" --threads 2 --stop-at 10 --save-to "$t/ck_one" >/dev/null
want=$(losses "$t/one.jsonl" | sed -n 11p)
resume() { # resume NAME CKPT -np N BINARY
  local name=$1 ck=$2
  shift 2
  if [ "$1" = one ]; then
    "$t/one" "${run[@]}" --threads 2 --resume "$t/$ck" --stop-at 11 --log "$t/$name.jsonl" --save-to "$t/ck_$name" >/dev/null
  else
    "${mpi[@]}" -np 2 "$t/$1" "${run[@]}" --resume "$t/$ck" --stop-at 11 --log "$t/$name.jsonl" --save-to "$t/ck_$name" >/dev/null
  fi
  got=$(losses "$t/$name.jsonl" | head -1)
  awk -v a="$got" -v b="$want" -v n="$name" 'BEGIN { d = a - b; if (d < 0) d = -d;
    printf "resume step 10 %-14s step 11 loss %s vs %s uninterrupted 1 rank (|rel| %.1e)\n", n, a, b, d / b;
    exit (d / b <= 1e-5 ? 0 : 1) }' || { echo "FAIL: resumed $name"; exit 1; }
}
resume "z1->z0" ck_z1 dp2
resume "z2->z0" ck_z2 dp2
resume "z2->one" ck_z2 one
resume "z0->z1" ck_z0 z1dp2
resume "z0->z2" ck_z0 z2dp2
resume "z3->z0" ck_z3 dp2
resume "z3->one" ck_z3 one
resume "z0->z3" ck_z0 z3dp2
# a logical checkpoint (one rank's) under zero 1: the state of a stacked parameter is split over dp along
# the layers (f32[1, 64]{S(dp)@0} a rank) where its parameter is whole, and is read per layer all the same
# (runtime/train/ckpt.c rt_ckpt_per_layer: fuzz_runs seed 20700029 asked for 'adam_m:blocks.rmsnorm.w' whole)
resume "one->z1" ck_one z1dp2
# ... and the index of zero 1's sharded checkpoint says so: converted to a single file, it holds the one
# rank's entries ('adam_m:blocks.0.layernorm.w', ..., not 'adam_m:blocks.layernorm.w' whole)
"$shardc" ckpt convert "$t/ck_z1/step_00000010" "$t/cv_z1" >/dev/null
[ "$("$shardc" ckpt info "$t/cv_z1" | grep '^  ')" = "$("$shardc" ckpt info "$t/ck_one/step_00000010" | grep '^  ')" ] ||
  { echo "FAIL: zero 1's sharded step 10 converted holds other entries than one rank's"; exit 1; }
echo "zero 1 dp2 sharded step 10, converted: the one rank's entries"
echo "zero: ok"
