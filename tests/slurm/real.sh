#!/usr/bin/env bash
# tests/slurm/real.sh [SHARDC] — the --sbatch script, scripts/launch.sh and the trainer's graceful
# stop (runtime/train/stop.c) against a REAL Slurm (on demand: not in ctest, not in CI). Needs a
# slurmctld that answers (tests/slurm/local_cluster.sh start brings up a one-node one here; its
# SLURM_CONF is used when SLURM_CONF is unset), 2 CPUs on a node, and a file system the node shares
# with this machine (the temporary folder; true on the local cluster). Skips (status 0, "SKIP")
# without one. SHARDC defaults to build/shardc. About 1.5-2.5 min, most of it Slurm's timers.
#   (c) the variables the runtime and launch.sh read: the batch step has SLURM_JOB_ID, SLURM_PROCID=0
#       and SLURM_NTASKS=2 but no SLURM_STEP_NUM_TASKS; every srun task has SLURM_PROCID,
#       SLURM_NTASKS=2, SLURM_LOCALID, SLURM_STEP_NUM_TASKS=2 and SLURM_NTASKS_PER_NODE=2.
#   (a) the time limit: `sbatch --time=1 --signal=B:USR1@50 job.sh` (the ranks held before step 3
#       by SHARDRT_FAULT_WAIT until a signal is in, so the 12 steps cannot end first): Slurm's
#       warning reaches the launcher, both ranks stop after step 3 with its checkpoint (status 75),
#       the launcher requeues the job (Restarts=1, pending), the rerun resumes from step 3 and ends
#       with every loss and the step-12 checkpoint bit-identical to an undisturbed mpirun run, and
#       the output file keeps both runs (--open-mode=append).
#   (b) `scancel --signal=USR1 --batch JOBID`: the same stop, requeue and bit-identical resume;
#       `scancel JOBID` (SIGTERM to every process of the job): the same stop (status 75, the step-3
#       checkpoint) but no requeue: the job stays CANCELLED.
# A requeued job is held by Slurm (EligibleTime: 120 s after the requeue on 22.05): (a) waits for it
# (SHARDC_REAL_FAST=1: not), (b) lets it start at once (`scontrol update JobId=.. StartTime=now`),
# which may start it while the previous run's step is still ending: its srun then fails to launch the
# tasks and returns 0 (seen on 22.05), which the launcher's --done-file check restarts.
if [ -z "${SLURM_CONF:-}" ] && [ -f "${SHARDC_SLURM_DIR:-/tmp/shardc-slurm}/slurm.conf" ]; then
  export SLURM_CONF=${SHARDC_SLURM_DIR:-/tmp/shardc-slurm}/slurm.conf
fi
skip() { echo "real.sh: SKIP: $* (tests/slurm/local_cluster.sh start brings up a one-node Slurm here)"; exit 0; }
for b in sbatch scontrol scancel srun; do command -v $b >/dev/null || skip "no $b on PATH"; done
ping=$(scontrol ping 2>&1) || true
grep -q "is UP" <<<"$ping" || skip "no slurmctld answers (scontrol ping: $(head -1 <<<"$ping"))"
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "${1:-build/shardc}")
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh
jobs_started=()
cleanup() {
  local j
  for j in "${jobs_started[@]}"; do scancel "$j" 2>/dev/null; done
  rm -rf "$t"
}
trap cleanup EXIT
echo "real.sh: $(sinfo -V) ($SLURM_CONF), node $(sinfo -h -N -o '%N %c CPUs %t' | head -1)"

"$shardc" build models/tiny.model -D seq=32 -D micro_batch=4 -D dp=2 -D tp=1 --world 2 -o "$t/dp2" --sbatch "$t/job.sh" 2>"$t/build.err" >/dev/null ||
  { cat "$t/build.err"; fail "build --sbatch"; }
ck=(--steps 12 --ckpt-every 4 --threads 1)
"${mpi[@]}" -np 2 "$t/dp2" "${run[@]}" "${ck[@]}" --save-to "$t/A" --log "$t/a.jsonl" >"$t/a.out" 2>&1 || { cat "$t/a.out"; fail "the mpirun run"; }
cd "$t"

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
submit() { # submit NAME SBATCH_OPTIONS...: the held run (SHARDRT_FAULT_WAIT=3) of job.sh into $t/NAME; prints the job id
  local name=$1 id
  shift
  id=$(SHARDRT_FAULT_WAIT=3 SHARDC_CKPT=$t/$name sbatch --parsable "$@" job.sh "${run[@]}" "${ck[@]}" --log "$t/$name.jsonl") ||
    fail "sbatch $*"
  echo "${id%%;*}"
}
held() { [ "$(grep -c "SHARDRT_FAULT_WAIT: waiting for a signal before step 3" "$t/shardc-tiny-$1.out" 2>/dev/null)" = 2 ]; }
# requeued NAME JOBID HOW [now]: the job stopped both ranks after step 3 with its checkpoint and requeued
# itself; its rerun (with now: let start at once) resumes from step 3 to mpirun's losses and step-12 checkpoint
requeued() {
  local name=$1 id=$2 how=$3 now=$4 out=$t/shardc-tiny-$2.out
  wait_for 150 in_out "$id" "launch.sh: job $id requeued" || { cat "$out"; fail "$how: job $id did not requeue itself"; }
  requeue_at=$(date +%s)
  grep -q "^stopped on SIGUSR1 after step 3 of 12: checkpoint $t/$name/step_00000003 saved; exit status 75" "$out" &&
    grep -q "tasks 0-1: Exited with exit code 75" "$out" || { cat "$out"; fail "$how: no stop after step 3 with status 75"; }
  wait_for 10 state_is "$id" PENDING && [ "$(field "$id" Restarts)" = 1 ] ||
    { scontrol show job "$id"; fail "$how: job $id is not pending again after its requeue"; }
  echo "  requeued: $(field "$id" JobState) ($(field "$id" Reason)), Restarts=1, EligibleTime $(field "$id" EligibleTime)"
  [ "$now" = now ] && { scontrol update JobId="$id" StartTime=now || fail "scontrol update StartTime=now"; }
  wait_for 200 state_is "$id" COMPLETED || { scontrol show job "$id"; cat "$out"; fail "$how: the requeued job $id did not complete"; }
  [ "$(field "$id" ExitCode)" = 0:0 ] || fail "$how: the requeued job's exit code $(field "$id" ExitCode)"
  grep -q -- "--resume auto: resuming from $t/$name/step_00000003" "$out" || { cat "$out"; fail "$how: the rerun did not resume from step 3"; }
  grep -q "^stopped on SIGUSR1 after step 3" "$out" || fail "$how: the first run's log is gone from $out (truncated on the requeue)"
  [ "$(last "$t/a.jsonl")" = "$(last "$t/$name.jsonl")" ] || { paste <(last "$t/a.jsonl") <(last "$t/$name.jsonl"); fail "$how: losses differ from mpirun's"; }
  same_ckpt "$t/A/step_00000012" "$t/$name/step_00000012" || fail "$how: the step-12 checkpoint differs from mpirun's"
  ! compgen -G "$t/.shardc-*" >/dev/null || fail "$how: a done file was left"
  rerun="rerun $(($(date +%s) - requeue_at)) s after the requeue"
  ! grep -q "launch failed" "$out" || rerun+=" (its srun's tasks failed to launch, status 0: restarted by the launcher)"
}

# (c) the environment of the batch step and of srun's tasks, under job.sh's allocation
{
  grep '^#!' job.sh
  grep '^#SBATCH' job.sh | grep -v -- '--output\|--signal\|--requeue'
  echo '#SBATCH --output=env-%j.out'
  echo 'env | grep ^SLURM_ | sort >"$1/batch.env"'
  echo 'srun -n 2 --mpi=pmix bash -c '\''env | grep ^SLURM_ | sort >"$0/task.$SLURM_PROCID.env"'\'' "$1"'
} >env.sh
sbatch --wait env.sh "$t" >/dev/null || { cat env-*.out; fail "the environment job"; }
has() { grep -qx -- "$2" "$t/$1.env" || { cat "$t/$1.env"; fail "$1: no $2"; }; }
grep -q '^SLURM_JOB_ID=[0-9]' batch.env && has batch SLURM_PROCID=0 && has batch SLURM_NTASKS=2 || fail "the batch step's variables"
! grep -q '^SLURM_STEP_NUM_TASKS=' batch.env || fail "SLURM_STEP_NUM_TASKS in the batch step (the runtime takes it for an srun task's)"
for r in 0 1; do
  for v in SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r SLURM_STEP_NUM_TASKS=2 SLURM_NTASKS_PER_NODE=2; do has task.$r "$v"; done
done
echo "(c) batch step: SLURM_JOB_ID, SLURM_PROCID=0, SLURM_NTASKS=2, no SLURM_STEP_NUM_TASKS; srun tasks: SLURM_PROCID/LOCALID 0 and 1, SLURM_NTASKS=2, SLURM_STEP_NUM_TASKS=2, SLURM_NTASKS_PER_NODE=2, $(grep '^SLURM_JOB_NODELIST=' task.0.env)"

# (a) the time limit: --time=1 with the warning 50 s before it (Slurm checks every ~30 s)
t0=$(date +%s)
id=$(submit L --time=1 --signal=B:USR1@50)
jobs_started+=("$id")
wait_for 60 held "$id" || { cat "$t/shardc-tiny-$id.out"; fail "(a) job $id: the ranks were not held before step 3"; }
requeued L "$id" "(a) time limit" "$([ "${SHARDC_REAL_FAST:-0}" = 1 ] && echo now)"
[ $((requeue_at - t0)) -lt 60 ] || fail "(a) job $id: requeued $((requeue_at - t0)) s after sbatch, past its 1-minute limit"
echo "(a) job $id, --time=1 --signal=B:USR1@50: requeued $((requeue_at - t0)) s after sbatch (the limit: 60 s); stopped after step 3 (75), requeued, $rerun, resumed: bit-identical"

# (b) scancel --signal=USR1 --batch: the same as the warning
id=$(submit U --time=5)
jobs_started+=("$id")
wait_for 60 held "$id" || { cat "$t/shardc-tiny-$id.out"; fail "(b) job $id: the ranks were not held before step 3"; }
scancel --signal=USR1 --batch "$id"
requeued U "$id" "(b) scancel --signal=USR1 --batch" now
echo "(b) job $id, scancel --signal=USR1 --batch: stopped after step 3 (75), requeued, $rerun, resumed: bit-identical"

# (b) scancel JOBID: SIGTERM to the job's processes; a cancel, not a requeue
id=$(submit K --time=5)
jobs_started+=("$id")
wait_for 60 held "$id" || { cat "$t/shardc-tiny-$id.out"; fail "(b) job $id: the ranks were not held before step 3"; }
scancel "$id"
out=$t/shardc-tiny-$id.out
wait_for 60 in_out "$id" "launch.sh: --requeue: not requeueing job $id after SIGTERM" || { cat "$out"; fail "(b) scancel $id: no 'not requeueing'"; }
grep -q "^stopped on SIGTERM after step 3 of 12: checkpoint $t/K/step_00000003 saved; exit status 75" "$out" && [ -f "$t/K/step_00000003/index.json" ] ||
  { cat "$out"; fail "(b) scancel $id: no stop after step 3 with its checkpoint"; }
sleep 5
state_is "$id" CANCELLED && [ "$(field "$id" Restarts)" = 0 ] || { scontrol show job "$id"; fail "(b) scancel $id: the job is not left cancelled"; }
echo "(b) job $id, scancel: stopped on SIGTERM after step 3 with its checkpoint (75), left CANCELLED (ExitCode $(field "$id" ExitCode), Restarts 0)"
echo "real.sh: ok ($(($(date +%s) - t0)) s of jobs)"
