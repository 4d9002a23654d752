#!/usr/bin/env bash
# A graceful stop on SIGTERM / SIGUSR1 (runtime/train/stop.c; label mpi):
#   - dp=2 on 2 ranks, 20 steps, a checkpoint every 4: rank 1 alone gets SIGTERM before step 7 (the
#     trainer's test hook SHARDRT_FAULT_SIGNAL=7:1): both ranks stop after step 7, its checkpoint
#     is complete (and no later one), the exit status is 75, and a --resume auto continues with steps
#     8..20's losses and the step-20 checkpoint bit-identical to an undisturbed run's;
#   - SIGTERM and SIGUSR1 to both ranks while that checkpoint is being written (its writer held by
#     SHARDRT_CKPT_STALL, then let go): the save completes, status 75, the resume bit-identical;
#   - one rank, the signal before step 8 (a --ckpt-every step: saved once): the same;
#   - a rank stuck in a collective (its peer held by SHARDRT_FAULT_WAIT): a second SIGTERM ends it
#     within 1 s, one with SHARDRT_STOP_WAIT=1 too, naming rank, signal and collective (status 3);
#   - scripts/launch.sh forwards its own SIGTERM to the ranks (SHARDRT_FAULT_WAIT holds every rank
#     before step 5 until the signal is there, so the test does not race a fast run), returns 75
#     without restarting, and the next launch resumes from step 5 to the undisturbed losses.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh
m=(models/tiny.model -D seq=32 -D micro_batch=4)
"$shardc" build "${m[@]}" -D dp=2 -D tp=1 --world 2 -o "$t/dp2" >/dev/null
"$shardc" build "${m[@]}" -D batch=4 --world 1 -o "$t/one" >/dev/null
ck=(--ckpt-every 4 --threads 1)
"${mpi[@]}" -np 2 "$t/dp2" "${run[@]}" "${ck[@]}" --save-to "$t/A" --log "$t/a.jsonl" >/dev/null
"$t/one" "${run[@]}" "${ck[@]}" --save-to "$t/A1" --log "$t/a1.jsonl" >/dev/null
# last_losses LOG: step -> its last logged loss, one line per step in step order
last_losses() { grep -o '"step":[0-9]*,"steps":[0-9]*,"loss":[^,]*' "$1" | awk -F'[:,]' '{ v[$2] = $6 } END { for (s = 1; s <= 20; s++) print v[s] }'; }
# stopped NAME STEP REF_LOG REF_CKPT: run NAME stopped with 75 after STEP with its checkpoint, none later,
# and its resume (RESUME: the command) ends with REF's losses and step-20 checkpoint
stopped() {
  local name=$1 step=$2 rc=$3
  [ "$rc" = 75 ] || { cat "$t/$name.out"; fail "$name: the stopped run exited $rc, want 75"; }
  local last
  last=$(cd "$t/$name" && ls -d step_* | tail -1)
  [ "$last" = "$(printf 'step_%08d' "$step")" ] || { ls "$t/$name"; fail "$name: the newest checkpoint is $last, want step $step's"; }
  grep -q "^stopped on .* after step $step of 20: checkpoint $t/$name/$last saved; exit status 75" "$t/$name.out" ||
    { cat "$t/$name.out"; fail "$name: no 'stopped on' line"; }
}
resumed() {
  local name=$1 ref=$2
  [ "$(last_losses "$t/$ref.jsonl")" = "$(last_losses "$t/$name.jsonl")" ] ||
    { paste <(last_losses "$t/$ref.jsonl") <(last_losses "$t/$name.jsonl"); fail "$name: the resumed losses differ"; }
  same_ckpt "$t/${ref^^}/step_00000020" "$t/$name/step_00000020" || fail "$name: the resumed step-20 checkpoint differs"
}
rc=0
SHARDRT_FAULT_SIGNAL=7:1 "${mpi[@]}" -np 2 "$t/dp2" "${run[@]}" "${ck[@]}" --save-to "$t/B" --log "$t/b.jsonl" >"$t/B.out" 2>&1 || rc=$?
stopped B 7 $rc
grep -q "^stopped on a signal to another rank after step 7" "$t/B.out" || { cat "$t/B.out"; fail "B: rank 0 did not say another rank got the signal"; }
grep -qx '{"step":7,"stopped":"another rank","checkpoint":true,"exit_status":75}' "$t/b.jsonl" || { cat "$t/b.jsonl"; fail "B: no stop record in --log"; }
"${mpi[@]}" -np 2 "$t/dp2" "${run[@]}" "${ck[@]}" --save-to "$t/B" --resume auto --log "$t/b.jsonl" >"$t/B2.out" 2>&1 || { cat "$t/B2.out"; fail "B: the resume failed"; }
grep -q "resumed from $t/B/step_00000007: step 7" "$t/B2.out" || { cat "$t/B2.out"; fail "B: not resumed from step 7"; }
cp "$t/b.jsonl" "$t/B.jsonl"
resumed B a
echo "dp=2, SIGTERM to rank 1 only before step 7: both stopped after step 7 (status 75, its checkpoint); resume bit-identical"
# signals during the save: rank 1's writer of step 7 held once its file is written (SHARDRT_CKPT_STALL), both
# ranks get SIGTERM and SIGUSR1 again, then the writer goes on: the checkpoint is whole and resumes bit-identically
SHARDRT_FAULT_SIGNAL=7:1 SHARDRT_CKPT_STALL=file:7:1 SHARDRT_CKPT_STALL_MARK=$t/mark \
  "${mpi[@]}" -np 2 "$t/dp2" "${run[@]}" "${ck[@]}" --save-to "$t/D" --log "$t/D.jsonl" >"$t/D.out" 2>&1 &
dpid=$!
for _ in $(seq 600); do [ -s "$t/mark.1" ] && break; sleep 0.1; done
[ -s "$t/mark.1" ] || { kill $dpid; cat "$t/D.out"; fail "D: the writer of step 7 did not stall"; }
pids=$(pgrep -f "^$t/dp2 " || true)
[ "$(echo "$pids" | wc -w)" = 2 ] || { kill $dpid; fail "D: 2 ranks not found ($pids)"; }
kill -TERM $pids
kill -USR1 $pids
sleep 0.3
touch "$t/mark.1.go"
rc=0
wait $dpid || rc=$?
stopped D 7 $rc
"${mpi[@]}" -np 2 "$t/dp2" "${run[@]}" "${ck[@]}" --save-to "$t/D" --resume auto --log "$t/D.jsonl" >"$t/D2.out" 2>&1 || { cat "$t/D2.out"; fail "D: the resume failed"; }
grep -q "resumed from $t/D/step_00000007: step 7" "$t/D2.out" || { cat "$t/D2.out"; fail "D: not resumed from step 7"; }
resumed D a
echo "dp=2, SIGTERM and SIGUSR1 to both ranks while step 7's checkpoint is written: it completes (status 75); resume bit-identical"
rc=0
SHARDRT_FAULT_SIGNAL=8 "$t/one" "${run[@]}" "${ck[@]}" --save-to "$t/C" --log "$t/C.jsonl" >"$t/C.out" 2>&1 || rc=$?
stopped C 8 $rc
grep -q "^stopped on SIGTERM after step 8" "$t/C.out" || { cat "$t/C.out"; fail "C: the signal is not named"; }
"$t/one" "${run[@]}" "${ck[@]}" --save-to "$t/C" --resume auto --log "$t/C.jsonl" >"$t/C2.out" 2>&1 || { cat "$t/C2.out"; fail "C: the resume failed"; }
resumed C a1
echo "one rank, SIGTERM before step 8 (a --ckpt-every step): stopped after it (status 75); resume bit-identical"
# a rank stuck in a collective (rank 0 held before step 5 by SHARDRT_FAULT_WAIT, rank 1 in step 5's
# first all-reduce waiting for it): SIGTERM to rank 1 alone would wait for the step's end; a second
# one ends it within RT_STOP_SECOND_S (1 s), and with one signal SHARDRT_STOP_WAIT=1 does: status 3,
# the message names rank 1, the signal and the collective; the checkpoints before stay whole
# stuck NAME KILLS... (env: SHARDRT_STOP_WAIT)
stuck() {
  local name=$1 pids p r1="" rc=0 t0 dt
  shift
  SHARDRT_FAULT_WAIT=5:0 "${mpi[@]}" -np 2 "$t/dp2" "${run[@]}" "${ck[@]}" --save-to "$t/$name" >"$t/$name.out" 2>&1 &
  local mp=$!
  held_ranks "$t/$name.out" 5 1
  sleep 0.5 # (rank 1 into step 5's all-reduce)
  pids=$(pgrep -f "^$t/dp2 " || true)
  for p in $pids; do tr '\0' '\n' <"/proc/$p/environ" | grep -qx OMPI_COMM_WORLD_RANK=1 && r1=$p; done
  [ -n "$r1" ] || { kill $mp; fail "$name: rank 1 not found ($pids)"; }
  t0=$(date +%s.%N)
  for sig in "$@"; do kill "-$sig" "$r1"; sleep 0.1; done
  wait $mp || rc=$?
  dt=$(echo "$(date +%s.%N) - $t0" | bc)
  if [ "$rc" = 0 ] || [ "$rc" = 75 ]; then cat "$t/$name.out"; fail "$name: exited $rc"; fi
  grep -q "^shardrt: rank 1: stopped on SIGTERM without a checkpoint of this step (the newest complete one stays: resume from it): [0-9.]* s after $want this rank was still in all_reduce #[0-9]* on group dp \[0,1\] .*: rank 0 has not joined it" "$t/$name.out" ||
    { cat "$t/$name.out"; fail "$name: no message naming rank 1, the signal and the collective"; }
  [ "$(echo "$dt < 10" | bc)" = 1 ] || { cat "$t/$name.out"; fail "$name: the job took $dt s to end"; }
  [ -s "$t/$name/step_00000004/index.json" ] || { ls -R "$t/$name"; fail "$name: step 4's checkpoint is not whole"; }
  printf '%s: ended in %.1f s (mpirun %d): %s\n' "$name" "$dt" "$rc" "$(grep -o 'rank 1: stopped on SIGTERM .* rank was still in all_reduce #[0-9]*' "$t/$name.out" | sed 's/ (the newest .*: / ... /')"
}
want="a second signal" stuck S TERM TERM
want="it (SHARDRT_STOP_WAIT 1 s)" SHARDRT_STOP_WAIT=1 stuck W TERM
# the launcher: its SIGTERM forwarded to the ranks
SHARDRT_FAULT_WAIT=5 bash scripts/launch.sh --np 2 --launcher "${mpi[*]}" --delay 1 -- \
  "$t/dp2" "${run[@]}" "${ck[@]}" --save-to "$t/L" --log "$t/L.jsonl" >"$t/L.out" 2>&1 &
lpid=$!
held_ranks "$t/L.out" 5 2
kill -TERM $lpid
rc=0
wait $lpid || rc=$?
stopped L 5 $rc
grep -q "launch.sh: the trainer stopped on a signal after saving a checkpoint (status 75): not restarting" "$t/L.out" || { cat "$t/L.out"; fail "L: the launcher's note"; }
! grep -q "launch.sh: attempt" "$t/L.out" || { cat "$t/L.out"; fail "L: the launcher restarted a stopped run"; }
bash scripts/launch.sh --np 2 --launcher "${mpi[*]}" --delay 1 -- "$t/dp2" "${run[@]}" "${ck[@]}" --save-to "$t/L" --log "$t/L.jsonl" >"$t/L2.out" 2>&1 ||
  { cat "$t/L2.out"; fail "L: the next launch failed"; }
grep -q -- "--resume auto: resuming from $t/L/step_00000005" "$t/L2.out" || { cat "$t/L2.out"; fail "L: the next launch did not resume from step 5"; }
resumed L a
echo "launch.sh: SIGTERM forwarded to both ranks (stopped after step 5, status 75, no restart); the next launch resumed bit-identically"
