# shellcheck shell=bash disable=SC2154 # ($t, $run, $ck: set by the scripts that source it)
# tests/slurm/lib.sh — what tests/slurm/real.sh and tests/slurm/nodes.sh share: sourced after
# tests/lib.sh and tests/codegen/lib.sh, in the temporary folder $t, where job.sh is the --sbatch
# script of a 2-rank trainer, ck its flags and $t/a.jsonl the log of its undisturbed mpirun run
# (whose step-12 checkpoint is $t/A/step_00000012).

# field JOBID NAME: NAME's value in `scontrol show job -o JOBID`
field() { scontrol show job -o "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
# wait_for SECONDS COMMAND...: until COMMAND succeeds (0), or 1 after SECONDS
wait_for() {
  local n=$(($1 * 5))
  shift
  for _ in $(seq "$n"); do "$@" && return 0; sleep 0.2; done
  return 1
}
in_out() { grep -q -- "$2" "$t/shardc-tiny-$1.out" 2>/dev/null; }
state_is() { [ "$(field "$1" JobState)" = "$2" ]; }
last() { grep -o '"step":[0-9]*,"steps":[0-9]*,"loss":[^,]*' "$1" | awk -F'[:,]' '{ v[$2] = $6 } END { for (s = 1; s <= 12; s++) print v[s] }'; }
submit() { # submit NAME SBATCH_OPTIONS...: the held run (SHARDRT_FAULT_WAIT=3) of ${script:-job.sh} into $t/NAME; prints the job id
  local name=$1 id
  shift
  id=$(SHARDRT_FAULT_WAIT=3 SHARDC_CKPT=$t/$name sbatch --parsable "$@" "${script:-job.sh}" "${run[@]}" "${ck[@]}" --log "$t/$name.jsonl") ||
    fail "sbatch $*"
  echo "${id%%;*}"
}
held() { [ "$(grep -c "SHARDRT_FAULT_WAIT: waiting for a signal before step 3" "$t/shardc-tiny-$1.out" 2>/dev/null)" = 2 ]; }
# requeued NAME JOBID HOW [now] [SIG]: the job stopped both ranks after step 3 (on SIG, default SIGUSR1) with
# its checkpoint and requeued itself; its rerun (with now: let start at once) resumes from step 3 to
# mpirun's losses and step-12 checkpoint. Sets requeue_at (when the requeue was seen) and rerun (a note).
requeued() {
  local name=$1 id=$2 how=$3 now=${4:-} sig=${5:-SIGUSR1} out=$t/shardc-tiny-$2.out
  wait_for 150 in_out "$id" "launch.sh: job $id requeued" || { cat "$out"; fail "$how: job $id did not requeue itself"; }
  requeue_at=$(date +%s)
  grep -q "^stopped on $sig after step 3 of 12: checkpoint $t/$name/step_00000003 saved; exit status 75" "$out" &&
    grep -q "tasks\? 0-1: Exited with exit code 75\|task [01]: Exited with exit code 75" "$out" || { cat "$out"; fail "$how: no stop after step 3 with status 75"; }
  wait_for 10 state_is "$id" PENDING && [ "$(field "$id" Restarts)" = 1 ] ||
    { scontrol show job "$id"; fail "$how: job $id is not pending again after its requeue"; }
  echo "  requeued: $(field "$id" JobState) ($(field "$id" Reason)), Restarts=1, EligibleTime $(field "$id" EligibleTime)"
  # the rerun gets 5 minutes: with the first run's --time=1 Slurm's warning (--signal=B:USR1@50, checked
  # every ~30 s) came as soon as 1 s after the rerun started (22.05), before the trainer's handler was
  # in, and ended its ranks (status 138, the job FAILED)
  scontrol update JobId="$id" TimeLimit=5 || fail "scontrol update TimeLimit=5"
  # (let start "now": 5 s on, once the previous run has ended: at +0.6 s slurmctld killed the rerun, "Killing
  # non-startable batch JobId=20: Job credential revoked", and the job FAILED; 22.05)
  [ "$now" = now ] && { scontrol update JobId="$id" StartTime=now+5 || fail "scontrol update StartTime=now+5"; }
  wait_for 200 state_is "$id" COMPLETED || { scontrol show job "$id"; cat "$out"; fail "$how: the requeued job $id did not complete"; }
  [ "$(field "$id" ExitCode)" = 0:0 ] || fail "$how: the requeued job's exit code $(field "$id" ExitCode)"
  grep -q -- "--resume auto: resuming from $t/$name/step_00000003" "$out" || { cat "$out"; fail "$how: the rerun did not resume from step 3"; }
  grep -q "^stopped on $sig after step 3" "$out" || fail "$how: the first run's log is gone from $out (truncated on the requeue)"
  [ "$(last "$t/a.jsonl")" = "$(last "$t/$name.jsonl")" ] || { paste <(last "$t/a.jsonl") <(last "$t/$name.jsonl"); fail "$how: losses differ from mpirun's"; }
  same_ckpt "$t/A/step_00000012" "$t/$name/step_00000012" || fail "$how: the step-12 checkpoint differs from mpirun's"
  ! compgen -G "$t/.shardc-*" >/dev/null || fail "$how: a done file was left"
  rerun="rerun $(($(date +%s) - requeue_at)) s after the requeue"
  ! grep -q "launch failed" "$out" || rerun+=" (its srun's tasks failed to launch, status 0: restarted by the launcher)"
}
