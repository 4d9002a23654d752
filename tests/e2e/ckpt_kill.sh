#!/usr/bin/env bash
# 10 kill -9s during sharded checkpoint writes, each restarted by the launcher, lose nothing
# (label mpi). dp=2 on 2 ranks, 24 steps, a sharded checkpoint every 2, --keep 2, started once
# through scripts/launch.sh (--max-restarts 10), which restarts every killed attempt with --resume
# auto. Attempt i stops one rank's checkpoint writer at a chosen point of step 2i's write (the
# trainer's test hook SHARDRT_CKPT_STALL, a list of points: runtime/train/train.h; the kill lands
# exactly there, no sleeps); the test stops the launcher (SIGSTOP) and kill -9s that rank (mpirun
# ends the other) or every rank at once. Once the ranks are gone, before the launcher goes on:
#   - every visible step_N is complete: byte-identical to the undisturbed run's step_N (a partial
#     one visible as complete fails here), and the newest is the one the kill point allows (the
#     previous checkpoint, or this one once its rename happened: nothing complete is lost);
# then the launcher continues (SIGCONT) and restarts. At the end:
#   - the launcher restarted 10 times and exited 0, each attempt saying it resumed from the newest
#     checkpoint the kill before it left (the first starting fresh);
#   - every loss any attempt logged equals the undisturbed run's for its step (bit-identical: the
#     same layout), the step-24 checkpoint is byte-identical, and no temp directory is left.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh
"$shardc" build models/tiny.model -D seq=32 -D micro_batch=4 -D dp=2 -D tp=1 --world 2 -o "$t/dp2" >/dev/null
ck=("${run[@]}" --steps 24 --ckpt-every 2 --threads 1)
"${mpi[@]}" -np 2 "$t/dp2" "${ck[@]}" --keep 0 --save-to "$t/ref" --log "$t/ref.jsonl" >"$t/ref.out" 2>&1 ||
  { cat "$t/ref.out"; fail "the undisturbed run"; }
# the kills: step point rank how (rank: kill -9 the stalled rank; all: every rank at once) and the
# steps the newest complete checkpoint may then be at
plan=(
  "2 start 1 rank 0"
  "4 piece 0 all 2"
  "6 file 1 rank 4"
  "8 renamed 0 all 6"
  "10 index 0 rank 8"
  "12 commit 0 all 12"
  "14 keep 0 rank 14"
  "16 piece 1 rank 14"
  "18 renamed 1 all 16,18"
  "20 file 0 rank 18"
)
newest() { find "$t/ck" -maxdepth 1 -name 'step_*' -printf '%f\n' 2>/dev/null | sort | tail -1; }
stall=""
for k in "${plan[@]}"; do
  read -r step point rank _ <<<"$k"
  stall+="${stall:+,}$point:$step:$rank"
done
SHARDRT_CKPT_STALL=$stall SHARDRT_CKPT_STALL_MARK=$t/mark \
  bash scripts/launch.sh --np 2 --launcher "${mpi[*]} -x SHARDRT_CKPT_STALL -x SHARDRT_CKPT_STALL_MARK" --delay 0 \
  --max-restarts 10 -- "$t/dp2" "${ck[@]}" --keep 2 --save-to "$t/ck" --log "$t/run.jsonl" >"$t/launch.out" 2>&1 &
launcher=$!
gone() { # the launcher left running (SIGCONT) before a failure exits
  kill -CONT $launcher 2>/dev/null || true
  kill $launcher 2>/dev/null || true
  local p
  for p in $(pgrep -f "^$t/dp2 " || true); do kill -9 "$p" 2>/dev/null || true; done
}
trap 'gone; rm -rf "$t"' EXIT # a failure or a timeout leaves no stopped launcher or rank behind
i=0 want=("--resume auto: no checkpoint in $t/ck")
for k in "${plan[@]}"; do
  i=$((i + 1))
  read -r step point rank how allowed <<<"$k"
  mark=$t/mark.$i n=0
  while [ ! -s "$mark" ] && kill -0 $launcher 2>/dev/null && [ $n -lt 600 ]; do sleep 0.05; n=$((n + 1)); done
  [ -s "$mark" ] || { gone; cat "$t/launch.out"; fail "kill $i: the writer never reached '$point' of step $step on rank $rank"; }
  kill -STOP $launcher # it restarts only once the checks below are done
  pids=$(pgrep -f "^$t/dp2 " || true)
  [ "$(echo "$pids" | wc -w)" = 2 ] || { gone; cat "$t/launch.out"; fail "kill $i: 2 ranks not found ($pids)"; }
  if [ "$how" = all ]; then kill -9 $pids; else kill -9 "$(cat "$mark")"; fi
  n=0
  while pgrep -f "^$t/dp2 " >/dev/null && [ $n -lt 600 ]; do sleep 0.05; n=$((n + 1)); done
  ! pgrep -f "^$t/dp2 " >/dev/null || { gone; fail "kill $i: the ranks did not end"; }
  # every visible checkpoint is complete, the newest is an allowed one, the one before it kept
  got=$(newest)
  got=${got#step_}
  got=$((10#${got:-0}))
  [[ ",$allowed," == *",$got,"* ]] || { gone; ls -A "$t/ck"; fail "kill $i at $point of step $step (rank $rank): newest checkpoint at step $got, want $allowed"; }
  for d in "$t"/ck/step_*; do
    [ -e "$d" ] || continue
    same_ckpt "$d" "$t/ref/${d##*/}" || { gone; ls -la "$d"; fail "kill $i at $point of step $step: ${d##*/} is visible but not the complete checkpoint"; }
  done
  if [ "$got" -ge 4 ]; then
    [ -d "$t/ck/step_$(printf %08d $((got - 2)))" ] || { gone; ls -A "$t/ck"; fail "kill $i: the checkpoint before step $got is lost"; }
  fi
  echo "kill $i: -9 of $how at '$point' of step $step's write on rank $rank: newest complete checkpoint step $got, $(find "$t/ck" -maxdepth 1 -name '.tmp-*' | wc -l) temp dir(s) left, every visible checkpoint complete"
  if [ "$got" = 0 ]; then want+=("--resume auto: no checkpoint in $t/ck"); else want+=("--resume auto: resuming from $t/ck/step_$(printf %08d "$got")"); fi
  kill -CONT $launcher
done
rc=0
wait $launcher || rc=$?
[ $rc = 0 ] || { cat "$t/launch.out"; fail "the launcher exited $rc after 10 kills"; }
[ "$(grep -c '^launch.sh: attempt [0-9]* failed with status' "$t/launch.out")" = 10 ] ||
  { cat "$t/launch.out"; fail "the launcher did not restart 10 times"; }
# each attempt resumed from what the kill before it left
[ "$(grep -- '^--resume auto: ' "$t/launch.out")" = "$(printf '%s\n' "${want[@]}")" ] ||
  { grep -- '--resume auto' "$t/launch.out"; printf 'want:\n'; printf '%s\n' "${want[@]}"; fail "the attempts did not resume from the newest complete checkpoints"; }
# every logged loss (complete lines of every run) against the undisturbed run's for that step
steploss() { grep -h '^{.*}$' "$@" | grep -o '"step":[0-9]*,"steps":[0-9]*,"loss":[^,]*' | awk -F'[:,]' '{ print $2, $6 }'; }
steploss "$t/ref.jsonl" >"$t/ref.loss"
steploss "$t/run.jsonl" | awk 'NR == FNR { want[$1] = $2; next } { n++; if (want[$1] != $2) { bad++; print "step " $1 ": " $2 ", undisturbed " want[$1] } }
  END { printf "%d logged losses over the 11 attempts\n", n; exit (bad || n < 24) }' "$t/ref.loss" - ||
  fail "a resumed run's losses differ"
same_ckpt "$t/ck/step_00000024" "$t/ref/step_00000024" || fail "the step-24 checkpoint differs"
left=$(find "$t/ck" -maxdepth 1 -name '.tmp-*')
[ -z "$left" ] || fail "temp directories left: $left"
echo "ckpt_kill: 10/10 kill -9s during sharded writes, restarted by the launcher, lost nothing; losses and the final checkpoint bit-identical"
