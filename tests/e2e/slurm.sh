#!/usr/bin/env bash
# Slurm, on a fake one (tests/e2e/fake-slurm: sbatch runs the batch script here, srun starts its
# tasks with Slurm's variables only; label mpi):
#   - shardc build ... --sbatch: the script asks for the plan's allocation (1 node x 2 tasks for
#     dp=2 on the CPU topology; plan --sbatch for p4d-x4 with the CUDA target: 4 nodes x 8 tasks,
#     a GPU per task);
#   - that script under the fake sbatch trains through srun (the runtime bootstraps from
#     SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID: "via srun"), and after a kill -9 of a rank at
#     step 6 its launcher restarts the step with --resume auto: every step's loss and the step-12
#     checkpoint bit-identical to an mpirun run's;
#   - srun's status 0 for tasks that never launched is restarted (--done-file); tasks that do not
#     share the job's directory (FAKE_SRUN_CHDIR) stop before any step with status 1, not restarted;
#   - SIGUSR1 to the batch script (the warning) and SIGTERM at the time limit (the fake scontrol's
#     Reason=TimeLimit) requeue the job after the ranks' stop; SIGTERM from scancel (Reason=None) does
#     not;
#   - srun with the wrong task count is refused with the count to use.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
src=$PWD
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh
export PATH="$src/tests/e2e/fake-slurm:$PATH"
"$shardc" build models/tiny.model -D seq=32 -D micro_batch=4 -D dp=2 -D tp=1 --world 2 -o "$t/dp2" --sbatch "$t/job.sh" 2>"$t/build.err" >/dev/null ||
  { cat "$t/build.err"; fail "build --sbatch"; }
want() { # want FILE LINE...: each line is in FILE
  local f=$1 l
  shift
  for l in "$@"; do grep -qxF -- "$l" "$f" || { cat "$f"; fail "'$l' not in $f"; }; done
}
want "$t/job.sh" "#SBATCH --nodes=1" "#SBATCH --ntasks=2" "#SBATCH --ntasks-per-node=2"
! grep -q -- "--gpus-per-task" "$t/job.sh" || fail "a GPU asked for a CPU trainer"
"$shardc" plan models/tiny.model --topology models/topo/p4d-x4.topo --target cuda --sbatch "$t/job32.sh" >/dev/null 2>&1 ||
  fail "plan --sbatch"
want "$t/job32.sh" "#SBATCH --nodes=4" "#SBATCH --ntasks=32" "#SBATCH --ntasks-per-node=8" "#SBATCH --gpus-per-task=1"
grep -qF "/train_tiny'}" "$t/job32.sh" || { cat "$t/job32.sh"; fail "plan --sbatch: not for train_tiny"; }
echo "sbatch scripts: 1 node x 2 tasks (dp=2, CPU); 4 nodes x 8 tasks, 1 GPU each (p4d-x4, CUDA)"

ck=(--steps 12 --ckpt-every 4 --threads 1)
"${mpi[@]}" -np 2 "$t/dp2" "${run[@]}" "${ck[@]}" --save-to "$t/A" --log "$t/a.jsonl" >"$t/a.out" 2>&1 || { cat "$t/a.out"; exit 1; }
cd "$t"
# rank 1 killed (SIGKILL) once step 6 is logged, by the trainer's fault hook (SHARDRT_FAULT_KILL: a kill from
# outside after the log showed the step could come after the 12 steps had ended, on a fast machine)
rc=0
SHARDRT_FAULT_KILL=6:1 SHARDC_CKPT=$t/B SHARDC_MAX_RESTARTS=2 sbatch job.sh "${run[@]}" "${ck[@]}" --log "$t/b.jsonl" >"$t/b.out" 2>&1 || rc=$?
grep -q "rank 1: SHARDRT_FAULT_KILL: killed (SIGKILL) after step 6" "$t/b.out" || { cat "$t/b.out"; fail "rank 1 was not killed"; }
[ $rc = 0 ] || { cat "$t/b.out"; fail "the batch script exited $rc"; }
grep -q "via srun" "$t/b.out" || { cat "$t/b.out"; fail "the ranks did not bootstrap from srun's variables"; }
grep -q "launch.sh: attempt 1 failed" "$t/b.out" && grep -q -- "--resume auto: resuming from $t/B/step_" "$t/b.out" ||
  { cat "$t/b.out"; fail "no restart from a checkpoint"; }
last() { grep -o '"step":[0-9]*,"steps":[0-9]*,"loss":[^,]*' "$1" | awk -F'[:,]' '{ v[$2] = $6 } END { for (s = 1; s <= 12; s++) print v[s] }'; }
[ "$(last "$t/a.jsonl")" = "$(last "$t/b.jsonl")" ] || { paste <(last "$t/a.jsonl") <(last "$t/b.jsonl"); fail "losses differ from mpirun's"; }
same_ckpt "$t/A/step_00000012" "$t/B/step_00000012" || fail "the step-12 checkpoint differs from mpirun's"
echo "sbatch under fake Slurm: srun bootstrap, a kill -9 restarted; losses and step-12 checkpoint bit-identical to mpirun's"
# srun returning 0 for tasks that never started (a real Slurm 22.05 after "task 0 launch failed"):
# without rank 0's done file (--done-file) the launcher counts it a failure and restarts
FAKE_SRUN_LAUNCH_FAIL=$t/lf SHARDC_CKPT=$t/F sbatch job.sh "${run[@]}" "${ck[@]}" --log "$t/f.jsonl" >"$t/f.out" 2>&1 ||
  { cat "$t/f.out"; fail "the batch script after a failed launch"; }
grep -q "launch.sh: attempt 1 ended with status 0 but its trainer did not complete" "$t/f.out" &&
  grep -q "launch.sh: attempt 1 failed with status 70; restart 1" "$t/f.out" && ! compgen -G "$t/.shardc-*" >/dev/null ||
  { cat "$t/f.out"; ls -A "$t"; fail "srun's status 0 without a launch: not restarted (or the done file left)"; }
[ "$(last "$t/a.jsonl")" = "$(last "$t/f.jsonl")" ] || fail "after a failed launch: losses differ from mpirun's"
echo "sbatch: srun's status 0 for tasks that never launched is restarted (--done-file); the run then ends bit-identically"
# --done-file where rank 0 does not share the job's directory (its node has a directory of its own:
# FAKE_SRUN_CHDIR): rank 0 does not see the launcher's file, and stops before any step with status 1,
# which is not restarted (its "done" would never have reached the launcher: every completed run
# trained again, up to --max-restarts times)
mkdir "$t/elsewhere"
rc=0
FAKE_SRUN_CHDIR=$t/elsewhere SHARDC_CKPT=$t/N sbatch job.sh "${run[@]}" "${ck[@]}" >"$t/n.out" 2>&1 || rc=$?
[ $rc = 1 ] && grep -q "SHARDRT_DONE_FILE='.shardc-[0-9]*.done' (scripts/launch.sh --done-file): rank 0, on host .* does not see the file the launcher wrote" "$t/n.out" &&
  grep -q "launch.sh: the trainer stopped with status 1" "$t/n.out" && ! grep -q "^step \|restart 1" "$t/n.out" && [ ! -e "$t/N/step_00000004" ] ||
  { cat "$t/n.out"; fail "--done-file not shared with rank 0: no clear error before any step, or restarted (status $rc)"; }
echo "sbatch: a done file rank 0 cannot see (no shared file system) stops the job before any step, status 1, not restarted"
# Slurm's warning before the time limit (#SBATCH --signal=B:USR1@120: SIGUSR1 to the batch script,
# i.e. the launcher it execs): forwarded through srun to the ranks, which stop after step 3 (every
# rank held there by SHARDRT_FAULT_WAIT until the signal is in) with its checkpoint; the launcher
# requeues the job (--requeue: scontrol requeue), whose next run resumes to the same losses
# (--open-mode=append: a real Slurm truncates the output file when the requeued job starts again;
# the fake scontrol's requeue SIGTERMs the job and itself, as a real one does: launch.sh must still
# say the job is requeued and return 0)
want "$t/job.sh" "#SBATCH --signal=B:USR1@120" "#SBATCH --requeue" "#SBATCH --open-mode=append"
SHARDRT_FAULT_WAIT=3 SHARDC_CKPT=$t/S sbatch job.sh "${run[@]}" "${ck[@]}" --log "$t/s.jsonl" >"$t/s.out" 2>&1 &
spid=$!
held_ranks "$t/s.out" 3 2
kill -USR1 $spid
rc=0
wait $spid || rc=$?
[ $rc = 0 ] && grep -q "^stopped on SIGUSR1 after step 3 of 12: checkpoint $t/S/step_00000003 saved" "$t/s.out" &&
  grep -q "fake scontrol: requeue $spid" "$t/s.out" && grep -q "launch.sh: job $spid requeued" "$t/s.out" || { cat "$t/s.out"; fail "SIGUSR1 to the batch script: no stop at step 3 and requeue (status $rc)"; }
SHARDC_CKPT=$t/S sbatch job.sh "${run[@]}" "${ck[@]}" --log "$t/s.jsonl" >"$t/s2.out" 2>&1 || { cat "$t/s2.out"; fail "the requeued job"; }
grep -q -- "--resume auto: resuming from $t/S/step_00000003" "$t/s2.out" || { cat "$t/s2.out"; fail "the requeued job did not resume from step 3"; }
[ "$(last "$t/a.jsonl")" = "$(last "$t/s.jsonl")" ] || { paste <(last "$t/a.jsonl") <(last "$t/s.jsonl"); fail "requeued: losses differ from mpirun's"; }
echo "sbatch: SIGUSR1 to the batch script stopped both ranks after step 3 with its checkpoint, requeued; the requeued job resumed bit-identically"
# the time limit reached without --signal's warning: Slurm SIGTERMs every process of the job, as
# scancel does, but sets the job's Reason=TimeLimit first (a real Slurm 22.05: tests/slurm/real.sh):
# the ranks stop after step 3 with its checkpoint, and the launcher requeues the job
export FAKE_SLURM_JOBS=$t/jobs
mkdir "$t/jobs"
# sigterm_job CKPT OUT REASON: a job held after step 3, Slurm's Reason for it set, the batch script
# SIGTERMed; sets spid (the job) and rc (its status)
sigterm_job() {
  SHARDRT_FAULT_WAIT=3 SHARDC_CKPT=$1 sbatch job.sh "${run[@]}" "${ck[@]}" >"$2" 2>&1 &
  spid=$!
  held_ranks "$2" 3 2
  echo "JobState=COMPLETING Reason=$3" >"$t/jobs/$spid"
  kill -TERM $spid
  rc=0
  wait $spid || rc=$?
}
sigterm_job "$t/T" "$t/tl.out" TimeLimit
[ $rc = 0 ] && grep -q "^stopped on SIGUSR1 after step 3 of 12: checkpoint $t/T/step_00000003 saved" "$t/tl.out" &&
  grep -q "launch.sh: --requeue: the SIGTERM was Slurm's at the job's time limit (Reason=TimeLimit" "$t/tl.out" &&
  grep -q "fake scontrol: requeue $spid" "$t/tl.out" && grep -q "launch.sh: job $spid requeued" "$t/tl.out" ||
  { cat "$t/tl.out"; fail "SIGTERM at the time limit (Reason=TimeLimit): no stop at step 3 and requeue (status $rc)"; }
echo "sbatch: SIGTERM at the time limit (Reason=TimeLimit) stopped both ranks after step 3 with its checkpoint, requeued"
# scancel JOBID (SIGTERM to every process of the job, the batch script included; Reason=None) is a
# cancel: the ranks stop with their checkpoint, but the job is not requeued (a real Slurm 22.05
# requeued it)
sigterm_job "$t/K" "$t/k.out" None
[ $rc = 75 ] && grep -q "^stopped on SIGUSR1 after step 3 of 12: checkpoint $t/K/step_00000003 saved" "$t/k.out" &&
  grep -q "launch.sh: --requeue: not requeueing job $spid after SIGTERM (a cancel: scancel; Slurm's Reason for the job: 'None'" "$t/k.out" &&
  ! grep -q "fake scontrol" "$t/k.out" ||
  { cat "$t/k.out"; fail "SIGTERM to the batch script: no stop at step 3 with status 75 and without a requeue (status $rc)"; }
echo "sbatch: SIGTERM to the batch script (scancel) stopped both ranks after step 3 with its checkpoint, status 75, not requeued"
# a trainer run in the batch script itself, without srun: Slurm gives the script SLURM_PROCID=0 and
# SLURM_NTASKS=2 as well (but not SLURM_STEP_NUM_TASKS, which only srun's tasks have), so a 1-rank
# trainer there is a single process, not srun's "rank 0 of 2" (a real Slurm 22.05: "srun says rank 0
# of 2 but MPI says rank 0 of 1"), and a 2-rank one is told to use a launcher
"$shardc" build "$src/models/tiny.model" -D seq=32 -D micro_batch=4 -D batch=4 --world 1 -o "$t/one" >/dev/null 2>&1 || fail "build one"
printf '#!/usr/bin/env bash\n#SBATCH --ntasks=2\n"$@"\n' >"$t/direct.sh"
sbatch "$t/direct.sh" "$t/one" "${run[@]}" --steps 2 --save-to '' >"$t/d1.out" 2>&1 && grep -q "^done: 2 step(s)" "$t/d1.out" ||
  { cat "$t/d1.out"; fail "a 1-rank trainer in a 2-task batch script, without srun"; }
rc=0
sbatch "$t/direct.sh" "$t/dp2" "${run[@]}" --steps 1 --save-to '' >"$t/d2.out" 2>&1 || rc=$?
[ $rc != 0 ] && grep -q "the plan needs 2 ranks .* but single process started 1" "$t/d2.out" ||
  { cat "$t/d2.out"; fail "a 2-rank trainer in the batch script, without srun (status $rc)"; }
echo "a trainer in the batch script without srun: one process (a 1-rank one trains; a 2-rank one is told to use a launcher)"
rc=0
srun -n 3 "$t/dp2" "${run[@]}" --steps 1 --save-to '' >"$t/c.out" 2>&1 || rc=$?
[ $rc != 0 ] && grep -q "launch it with srun -n 2" "$t/c.out" || { cat "$t/c.out"; fail "srun -n 3 of a 2-rank trainer (status $rc)"; }
echo "slurm: ok"
