#!/usr/bin/env bash
# scripts/launch.sh restarts a killed job from its newest checkpoint (label mpi):
#   - dp=2 on 2 ranks, 20 steps, a checkpoint every 4: rank 1 is killed (SIGKILL, the trainer's
#     SHARDRT_FAULT_KILL hook) after step 10 is logged; the launcher restarts the job with --resume auto, which finishes with every step's
#     loss (the last one logged for each step) and the step-20 checkpoint bit-identical to an
#     undisturbed run's;
#   - elastic: the same kill, with --elastic 1:ONE (the 1-rank trainer of the same global batch 8,
#     through 2 accumulation micro-steps of 4): the restart continues on one rank, every loss within
#     1e-5 of the undisturbed run's (tests/codegen/layouts.sh justifies the tolerance); with
#     --elastic 1 --model MODEL the launcher re-plans itself (shardc build --world 1 -D batch=8
#     --pick: 2 accumulation micro-steps of 4) and the restart on one rank is within 1e-5 too;
#     --elastic 4 re-plans for 4 ranks at batch 8 (the file's micro-batch of 8 cannot be kept: the
#     planner chooses one); --elastic 3 (8 sequences of 4 cannot be spread over 3 ranks) is refused before training
#     (status 2), and so is --elastic M without --model; with --elastic 1:HALF (global batch 4)
#     the restart is refused (status 1: not restarted again);
#   - a trainer that stops on its own error (status 1) is not restarted; one that fails every time
#     (status 3) is restarted --max-restarts times, then its status returned.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh
m=(models/tiny.model -D seq=32)
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=1 --world 2 -o "$t/dp2" >/dev/null
# the elastic restart's trainer: 1 rank keeps the global batch of 8 through 2 accumulation micro-steps of 4
"$shardc" build "${m[@]}" -D micro_batch=4 -D batch=8 --world 1 -o "$t/one" >/dev/null
# (the plan captured first: piped into grep -q, shardc could die of SIGPIPE when grep exits early)
plan=$("$shardc" plan "${m[@]}" -D micro_batch=4 -D batch=8 --world 1 --ir)
grep -q "repeat accum x2" <<<"$plan" || fail "the 1-rank plan does not accumulate"
# and one of another global batch (4), which a restart must refuse rather than train on
"$shardc" build "${m[@]}" -D micro_batch=4 -D batch=4 --world 1 -o "$t/half" >/dev/null
ck=(--ckpt-every 4 --threads 1)
"${mpi[@]}" -np 2 "$t/dp2" "${run[@]}" "${ck[@]}" --save-to "$t/A" --log "$t/a.jsonl" >/dev/null
# last_losses LOG: step -> its last logged loss, one line per step in step order
last_losses() { grep -o '"step":[0-9]*,"steps":[0-9]*,"loss":[^,]*' "$1" | awk -F'[:,]' '{ v[$2] = $6 } END { for (s = 1; s <= 20; s++) print v[s] }'; }
# killed NAME EXTRA...: the launcher's run NAME, rank 1 killed (SIGKILL) once step 10 is logged; it must exit
# $EXPECT_RC (default 0). The trainer's fault hook kills the rank (SHARDRT_FAULT_KILL, runtime/train/fault.c):
# a kill from outside after the log showed step 10 came too late on a fast machine (the 20 steps took 0.12 s)
# and found no rank to kill. The hook fires only in a run that started from step 1, not in the restart.
killed() {
  local name=$1
  shift
  local rc=0
  SHARDRT_FAULT_KILL=10:1 bash scripts/launch.sh --np 2 --launcher "${mpi[*]}" --delay 1 --max-restarts 2 "$@" -- \
    "$t/dp2" "${run[@]}" "${ck[@]}" --save-to "$t/$name" --log "$t/$name.jsonl" >"$t/$name.out" 2>&1 || rc=$?
  grep -q "rank 1: SHARDRT_FAULT_KILL: killed (SIGKILL) after step 10" "$t/$name.out" || { cat "$t/$name.out"; fail "$name: rank 1 was not killed"; }
  grep -q "launch.sh: attempt 1 failed with status" "$t/$name.out" || { cat "$t/$name.out"; fail "$name: no restart"; }
  [ $rc = "${EXPECT_RC:-0}" ] || { cat "$t/$name.out"; fail "$name: the launcher exited $rc"; }
  grep -q -- "--resume auto: resuming from $t/$name/step_" "$t/$name.out" || { cat "$t/$name.out"; fail "$name: the restart did not resume"; }
}
killed B
[ "$(last_losses "$t/a.jsonl")" = "$(last_losses "$t/B.jsonl")" ] || { paste <(last_losses "$t/a.jsonl") <(last_losses "$t/B.jsonl"); fail "restarted losses differ"; }
same_ckpt "$t/A/step_00000020" "$t/B/step_00000020" || fail "the restarted run's step-20 checkpoint differs"
echo "restart after kill -9: $(grep -c 'launch.sh: attempt' "$t/B.out") restart(s), losses and step-20 checkpoint bit-identical to the undisturbed run"
killed E --elastic "1:$t/one"
paste <(last_losses "$t/a.jsonl") <(last_losses "$t/E.jsonl") | awk '
  { n++; d = $2 - $1; if (d < 0) d = -d; r = d / $1; if (r > w) w = r; if (r > 1e-5 || $2 == "") bad++ }
  END { printf "elastic restart on 1 rank after kill -9: worst |rel| loss difference %.2e over %d steps\n", w, n; exit (bad || n != 20) }' ||
  fail "elastic restart"
grep -q "^model tiny .*batch 8 x 32 tokens" "$t/E.out" || { cat "$t/E.out"; fail "the elastic restart's global batch"; }
# re-planned by the launcher: --elastic 1 --model builds the 1-rank trainer itself at dp2's global batch of 8
# (shardc --pick for 1 rank, the micro-batch of 4 kept as given: 2 accumulation micro-steps)
killed R --elastic 1 --model "${m[*]} -D micro_batch=4" --shardc "$shardc"
grep -qF "launch.sh: restarts after a failure run $t/dp2.world-1: Compiled for 1 rank(s) (dp 1 x pp 1 x cp 1 x tp 1); global batch 8 sequences per optimizer step (2 accumulation micro-step(s))" "$t/R.out" ||
  { cat "$t/R.out"; fail "the launcher did not re-plan for 1 rank at the global batch of 8"; }
grep -q "^model tiny .*batch 8 x 32 tokens" "$t/R.out" || { cat "$t/R.out"; fail "the re-planned restart's global batch"; }
paste <(last_losses "$t/a.jsonl") <(last_losses "$t/R.jsonl") | awk '
  { n++; d = $2 - $1; if (d < 0) d = -d; r = d / $1; if (r > w) w = r; if (r > 1e-5 || $2 == "") bad++ }
  END { printf "elastic restart re-planned by the launcher for 1 rank after kill -9: worst |rel| loss difference %.2e over %d steps\n", w, n; exit (bad || n != 20) }' ||
  fail "the re-planned elastic restart"
# a world that cannot keep the global batch (8 sequences of micro-batch 4 over 3 ranks): refused before any training
rc=0
bash scripts/launch.sh --np 2 --launcher "${mpi[*]}" --elastic 3 --model "${m[*]} -D micro_batch=4" --shardc "$shardc" -- \
  "$t/dp2" "${run[@]}" "${ck[@]}" --save-to "$t/T" >"$t/T.out" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "launch.sh: --elastic 3: cannot re-plan .* for 3 rank(s) keeping the global batch of 8 sequences" "$t/T.out" && [ ! -e "$t/T" ] ||
  { cat "$t/T.out"; fail "an elastic world that cannot keep the global batch was not refused before training (status $rc)"; }
echo "elastic re-plan for 3 ranks (global batch 8, micro-batch 4): refused before training: $(grep -A1 'cannot re-plan' "$t/T.out" | tail -1)"
# 4 ranks at the global batch of 8: the file's micro-batch of 8 cannot be kept, the re-plan chooses one
# (the job itself stops on a user error here: a missing --data, not restarted)
rc=0
bash scripts/launch.sh --np 2 --elastic 4 --model "${m[*]}" --shardc "$shardc" -- "$t/dp2" --data "$t/missing.txt" --save-to "$t/F" >"$t/F.out" 2>&1 || rc=$?
[ $rc = 1 ] && grep -q "launch.sh: restarts after a failure run $t/dp2.world-4: Compiled for 4 rank(s) (.*); global batch 8 sequences" "$t/F.out" ||
  { cat "$t/F.out"; fail "the launcher did not re-plan for 4 ranks at the global batch of 8 (status $rc)"; }
echo "elastic re-plan for 4 ranks: $(grep -o 'Compiled for 4 rank.*' "$t/F.out")"
rc=0
bash scripts/launch.sh --np 2 --elastic 1 -- "$t/dp2" --save-to "$t/T" >"$t/T.out" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "give --model" "$t/T.out" || { cat "$t/T.out"; fail "--elastic M without --model (status $rc)"; }
# the launcher's own flags: checked before anything starts (a bad --np reached mpirun, a bad --delay
# failed at the first restart's sleep, --model / --shardc without --elastic M did nothing)
for c in "--np abc|--np 'abc' is not a positive integer" "--delay 1s|--delay '1s' is not a number of seconds" \
  "--model m.model|--model is for --elastic M" "--shardc $shardc|--shardc re-plans for --elastic M"; do
  rc=0
  bash scripts/launch.sh ${c%%|*} -- "$t/dp2" --save-to "$t/T" >"$t/T.out" 2>&1 || rc=$?
  [ $rc = 2 ] && grep -qF -- "launch.sh: ${c#*|}" "$t/T.out" || { cat "$t/T.out"; fail "launch.sh ${c%%|*} (status $rc)"; }
done
rc=0
bash scripts/launch.sh --np 2 -- "$t/nope" --save-to "$t/T" >"$t/T.out" 2>&1 || rc=$?
[ $rc = 2 ] && grep -qF "launch.sh: the trainer '$t/nope' is not an executable file" "$t/T.out" ||
  { cat "$t/T.out"; fail "a missing trainer (status $rc)"; }
rc=0
EXPECT_RC=1 killed H --elastic "1:$t/half"
grep -q "was written with batch 8 x 32 tokens, this run has 4 x 32" "$t/H.out" && grep -q "not restarting" "$t/H.out" ||
  { cat "$t/H.out"; fail "an elastic restart with another global batch was not refused"; }
echo "elastic restart with another global batch (4 instead of 8): refused, not restarted"
rc=0
bash scripts/launch.sh --np 2 --launcher "${mpi[*]}" -- "$t/dp2" --data "$t/missing.txt" --save-to "$t/C" >"$t/C.out" 2>&1 || rc=$?
[ $rc = 1 ] && grep -q "not restarting" "$t/C.out" || { cat "$t/C.out"; fail "a user error was restarted (status $rc)"; }
# a job that keeps failing is restarted --max-restarts times, then its status is returned
printf '#!/bin/sh\necho "$*" >>"%s/crash.count"\nexit 3\n' "$t" >"$t/crash.sh"
chmod +x "$t/crash.sh"
rc=0
bash scripts/launch.sh --np 1 --launcher "" --max-restarts 2 --delay 0 -- "$t/crash.sh" --save-to "$t/K" >"$t/K.out" 2>&1 || rc=$?
[ $rc = 3 ] && [ "$(grep -c -- '--save-to .* --resume auto$' "$t/crash.count")" = 3 ] &&
  grep -q "launch.sh: attempt 3 failed with status 3; no restart left (--max-restarts 2)" "$t/K.out" ||
  { cat "$t/K.out" "$t/crash.count"; fail "--max-restarts 2 (status $rc)"; }
echo "a job failing every time: 1 attempt + 2 restarts (--max-restarts 2), then its status 3"
echo "restart: ok"
