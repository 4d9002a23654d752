#!/usr/bin/env bash
# Gradient accumulation in the compiled trainer (label mpi): the tiny GPT with a global batch of 8
# sequences as 1 rank x micro-batch 8 (the reference), 1 rank x 2 micro-steps of 4, 2 dp ranks x
# 2 micro-steps of 2, and dp 2 x tp 2 x 2 micro-steps of 2, the last two also under zero 3 (the
# parameters gathered inside the micro-step loop; zero 3's sums are dp shards, as are those of
# dp 2 x zero 2: each micro-step's gradients reduce-scattered, a layer's in its backward loop,
# passes/zero_sums.c; with tp: test_accum_equiv in fp64); with dp the last micro-step runs after the loop so
# its backward overlaps the gradient all-reduce (passes/peel.c): 20 AdamW steps give the reference's
# loss curve within lib.sh's 1e-5 (the micro-steps change only the order of fp32 sums, as the
# layouts do: layouts.sh). The trainer reads each rank's rows of the global batch and logs the
# global batch; --batch is the global batch; a checkpoint resumes bit-identically; --sample from the
# reference's weights gives the reference's tokens (1 rank, dp 2, dp 2 x tp 2 zero 3, zero 2, cp 2 with
# full recompute). The CUDA target runs it on the emulated device too (and samples its big batch's tokens).
set -euo pipefail
shardc=$(realpath "$1")
cd "$(dirname "$0")/../.."
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh

m=(models/tiny.model -D seq=32 -D batch=8)
"$shardc" build "${m[@]}" -D micro_batch=8 --world 1 -o "$t/one"
"$shardc" build "${m[@]}" -D micro_batch=4 --world 1 -o "$t/acc2" --emit-c "$t/src"
grep -q 'repeat accum x2' "$t/src/tiny.c" || { echo "FAIL: no accumulation loop in the generated C"; exit 1; }
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=2 -D tp=1 --world 2 -o "$t/dp2acc2"
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=2 -D tp=2 --world 4 -o "$t/dp2tp2acc2"
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=2 -D tp=1 -D zero=3 --world 2 -o "$t/z3dp2acc2"
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=2 -D tp=2 -D zero=3 --world 4 -o "$t/z3dp2tp2acc2"
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=2 -D tp=1 -D zero=2 --world 2 -o "$t/z2dp2acc2"
# dp 2: the last micro-step runs after the loop (passes/peel.c) and its backward loop all-reduces the
# layers' gradients (overlapped), nothing over dp is left in the loop's body
"$shardc" plan "${m[@]}" -D micro_batch=2 -D dp=2 -D tp=1 --world 2 --dump-ir >"$t/dp2.ir" 2>&1
grep -q 'repeat accum x1 ' "$t/dp2.ir" || { echo "FAIL: dp 2 x 2 micro-steps: no 1-iteration accumulation loop"; exit 1; }
nl=$(awk '/repeat accum x1 / { inacc = 1; next } inacc && /^  }/ { inacc = 0; after = 1; next }
  after && /^    .*= all_reduce\(.*over=dp/ { n++ } END { print n + 0 }' "$t/dp2.ir")
[ "$nl" -gt 0 ] || { echo "FAIL: dp 2 x 2 micro-steps: no gradient all-reduce inside the last backward loop"; exit 1; }
echo "dp 2 accum 2: last micro-step peeled, $nl dp all-reduce(s) inside its backward loop"
# zero 3: the parameters are gathered inside the micro-step loop (its own body: 4 spaces deep in the IR)
"$shardc" plan "${m[@]}" -D micro_batch=2 -D dp=2 -D tp=1 -D zero=3 --world 2 --dump-ir >"$t/z3.ir" 2>&1
ng=$(grep -c '^    %[0-9]* : .*= all_gather(.*over=dp' "$t/z3.ir" || true)
[ "$ng" -gt 0 ] || { echo "FAIL: zero 3 gathers no parameter in the accumulation loop's body"; exit 1; }
echo "zero 3 dp2 accum 2: $ng parameter all-gathers in the micro-step loop's body"
# zero 2 (and 3): the running sums are the dp shards, each micro-step's layer gradients
# reduce-scattered inside the micro-step loop's backward loop (passes/zero_sums.c: 6 spaces deep)
"$shardc" plan "${m[@]}" -D micro_batch=2 -D dp=2 -D tp=1 -D zero=2 --world 2 --dump-ir >"$t/z2.ir" 2>&1
nrs=$(grep -c '^      %[0-9]* : .*= reduce_scatter(.*over=dp' "$t/z2.ir" || true)
[ "$nrs" -gt 0 ] || { echo "FAIL: zero 2 reduce-scatters no gradient inside the micro-step loop's backward loop"; exit 1; }
grep -q 'S(dp)@1.* = repeat accum x1 ' "$t/z2.ir" || { echo "FAIL: zero 2: no running sum split over dp"; exit 1; }
echo "zero 2 dp2 accum 2: $nrs gradient reduce-scatter(s) in the micro-step loop's backward loop, the sums split over dp"
"$t/one" "${run[@]}" --threads 2 --log "$t/one.jsonl" --save-to "$t/ck_one" >/dev/null
"$t/acc2" "${run[@]}" --threads 2 --batch 8 --log "$t/acc2.jsonl" --save-to "$t/ck_acc2" >"$t/acc2.out"
compare "1 rank, accum 2" "$t/acc2.jsonl" "$t/one.jsonl"
grep -q 'batch 8 x 32 tokens' "$t/acc2.out" || { echo "FAIL: the trainer does not log the global batch"; cat "$t/acc2.out"; exit 1; }
# a checkpoint of the accumulating trainer resumes bit-identically (its data position counts the global batch)
"$t/acc2" "${run[@]}" --threads 2 --stop-at 10 --save-to "$t/ck_res" >/dev/null
"$t/acc2" "${run[@]}" --threads 2 --resume "$t/ck_res" --log "$t/res.jsonl" --save-to "$t/ck_res" >"$t/res.out"
grep -q 'step 10, data position 80' "$t/res.out" || { echo "FAIL: resume position"; cat "$t/res.out"; exit 1; }
cmp <(losses "$t/acc2.jsonl" | tail -10) <(losses "$t/res.jsonl") || { echo "FAIL: resumed losses differ"; exit 1; }
"${mpi[@]}" -np 2 "$t/dp2acc2" "${run[@]}" --log "$t/dp2acc2.jsonl" >/dev/null
compare "dp 2, accum 2" "$t/dp2acc2.jsonl" "$t/one.jsonl"
"${mpi[@]}" -np 4 "$t/dp2tp2acc2" "${run[@]}" --log "$t/dp2tp2acc2.jsonl" >/dev/null
compare "dp 2 x tp 2, accum 2" "$t/dp2tp2acc2.jsonl" "$t/one.jsonl"
"${mpi[@]}" -np 2 "$t/z3dp2acc2" "${run[@]}" --log "$t/z3dp2acc2.jsonl" >/dev/null
compare "zero 3 dp 2, accum 2" "$t/z3dp2acc2.jsonl" "$t/one.jsonl"
"${mpi[@]}" -np 4 "$t/z3dp2tp2acc2" "${run[@]}" --log "$t/z3dp2tp2acc2.jsonl" >/dev/null
compare "zero 3 dp 2 x tp 2, accum 2" "$t/z3dp2tp2acc2.jsonl" "$t/one.jsonl"
"${mpi[@]}" -np 2 "$t/z2dp2acc2" "${run[@]}" --log "$t/z2dp2acc2.jsonl" >/dev/null
compare "zero 2 dp 2, accum 2" "$t/z2dp2acc2.jsonl" "$t/one.jsonl"
if "$t/acc2" "${run[@]}" --batch 4 >"$t/bad.out" 2>&1; then echo "FAIL: --batch 4 accepted"; exit 1; fi
grep -q -- '--batch 4: this program was compiled for' "$t/bad.out" || { echo "FAIL: --batch error"; cat "$t/bad.out"; exit 1; }
# --sample: the logits entry runs the first micro-step's forward (codegen/emit.c, Cg.once; peeled under dp):
# from the reference's step-20 weights every layout samples the reference's tokens (temperature 0.5,
# the recipe's seed), which an untrained model's are not
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=1 -D cp=2 -D tp=1 -D recompute=full --world 2 -o "$t/cp2rcacc2"
ck=(--init-from "$t/ck_one/step_00000020")
"$t/one" "${samp[@]}" --threads 2 >"$t/s_init.out"
"$t/one" "${samp[@]}" --threads 2 "${ck[@]}" >"$t/s_one.out"
[ "$(sample_of "$t/s_init.out")" != "$(sample_of "$t/s_one.out")" ] || { echo "FAIL: the untrained model's sample"; exit 1; }
"$t/acc2" "${samp[@]}" --threads 2 "${ck[@]}" >"$t/s_acc2.out"
same_sample "sample: 1 rank, accum 2" "$t/s_acc2.out" "$t/s_one.out"
for c in dp2acc2:2 z3dp2tp2acc2:4 z2dp2acc2:2 cp2rcacc2:2; do
  "${mpi[@]}" -np "${c#*:}" "$t/${c%%:*}" "${samp[@]}" "${ck[@]}" >"$t/s_${c%%:*}.out"
  same_sample "sample: ${c%%:*}" "$t/s_${c%%:*}.out" "$t/s_one.out"
done
# the CUDA target on the emulated device: 2 micro-steps against its own big batch, 3 steps (the
# emulation is slow), within the same 1e-5
cm=(models/tiny.model -D seq=32 -D batch=8 -D d=32 -D layers=1 --world 1 --target cuda)
"$shardc" build "${cm[@]}" -D micro_batch=8 -o "$t/cu1" 2>/dev/null
"$shardc" build "${cm[@]}" -D micro_batch=4 -o "$t/cu2" 2>/dev/null
for n in cu1 cu2; do
  SHARDRT_DEVICE=emu "$t/$n" --data "$t/data.txt" --steps 3 --eval-every 0 --val-batches 1 --log "$t/$n.jsonl" \
    --save-to "$t/ck_$n" >/dev/null
done
SHARDRT_DEVICE=emu "$t/cu1" "${samp[@]}" --init-from "$t/ck_cu1/step_00000003" >"$t/s_cu1.out"
SHARDRT_DEVICE=emu "$t/cu2" "${samp[@]}" --init-from "$t/ck_cu1/step_00000003" >"$t/s_cu2.out"
same_sample "sample: cuda emu, accum 2" "$t/s_cu2.out" "$t/s_cu1.out"
paste <(losses "$t/cu1.jsonl") <(losses "$t/cu2.jsonl") | awk '
  { n++; d = $2 - $1; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r; if (r > 1e-5) bad++ }
  END { printf "%-28s worst |rel| loss difference vs its big batch over %d steps: %.2e\n", "cuda emu, accum 2", n, w
        if (n != 3 || bad) { print "FAIL cuda emu accumulation"; exit 1 } }'
echo "accumulation: ok"
