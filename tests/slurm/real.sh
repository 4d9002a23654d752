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
#   (d) the time limit without --signal (job.sh less its #SBATCH --signal line, --time=1): Slurm
#       SIGTERMs every process of the job as scancel does, with the job's Reason=TimeLimit (scancel's:
#       None), which the launcher reads: the same stop after step 3, but a requeue and a bit-identical
#       resume.
# A requeued job is held by Slurm (EligibleTime: 120 s after the requeue on 22.05): (a) waits for it
# (SHARDC_REAL_FAST=1: not), (b) and (d) let it start 5 s on (`scontrol update JobId=..
# StartTime=now+5`), which may start it while the previous run's step is still ending: its srun then
# fails to launch the tasks and returns 0 (seen on 22.05), which the launcher's --done-file check
# restarts. Every rerun gets TimeLimit=5 (tests/slurm/lib.sh requeued).
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
# shellcheck source=tests/slurm/lib.sh
source tests/slurm/lib.sh
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

# (d) the time limit without --signal's warning: SIGTERM to every process of the job, as scancel, but
# with Reason=TimeLimit: stopped, requeued (not cancelled) and resumed
grep -v -- '^#SBATCH --signal' job.sh >job-nosig.sh
t1=$(date +%s)
id=$(script=job-nosig.sh submit D --time=1)
jobs_started+=("$id")
wait_for 60 held "$id" || { cat "$t/shardc-tiny-$id.out"; fail "(d) job $id: the ranks were not held before step 3"; }
requeued D "$id" "(d) time limit without --signal" now SIGTERM
grep -q "DUE TO TIME LIMIT" "$t/shardc-tiny-$id.out" &&
  grep -q "launch.sh: --requeue: the SIGTERM was Slurm's at the job's time limit (Reason=TimeLimit" "$t/shardc-tiny-$id.out" ||
  { cat "$t/shardc-tiny-$id.out"; fail "(d) job $id: not requeued as a time limit"; }
echo "(d) job $id, --time=1 without --signal: SIGTERM at the limit (Reason=TimeLimit) $((requeue_at - t1)) s after sbatch; stopped after step 3 (75), requeued, $rerun, resumed: bit-identical"
echo "real.sh: ok ($(($(date +%s) - t0)) s of jobs)"
