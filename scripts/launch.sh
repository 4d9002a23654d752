#!/usr/bin/env bash
# scripts/launch.sh — starts a shardc trainer and restarts it after a failure, from the newest
# complete checkpoint, up to --max-restarts times.
#
#   scripts/launch.sh [--np N] [--max-restarts K] [--requeue] [--delay S] [--launcher "mpirun ..."] [--done-file PATH] -- TRAINER [FLAGS...]
#
# Each attempt runs `LAUNCHER -np N TRAINER FLAGS --resume auto` (`srun -n N ...` for srun) (--resume auto: the newest complete
# checkpoint in --save-to, or a fresh start when there is none yet), so the trainer's flags must
# give --save-to (or its recipe a checkpoint directory), and --ckpt-every bounds the work a failure
# loses. An attempt that ends with status 0 ends the launcher (0). Status 1 is the trainer's own
# verdict — a user error or a diverged run (NaN / Inf) — which a restart would only repeat: the
# launcher stops with it. Anything else (a rank killed or crashed, the watchdog's status 3, the
# launcher's own failure) is restarted after --delay seconds (default 2), at most --max-restarts
# times (default 3); then the last status is returned.
#
# Elastic restarts: checkpoints resume under any layout, so the restarts after the first failure
# may run on another number of ranks (say, after losing a node), with the same global batch:
#   --elastic M --model "FILE.model [shardc options]"   re-plans: before the first attempt the
#       launcher reads TRAINER's global batch G (its --help), and builds the trainer for M ranks
#       itself, `shardc build FILE.model [options] --world M -D batch=G --pick -o TRAINER.world-M`
#       (the planner's fastest plan for M ranks at that global batch: dp, tp, pp, ZeRO, micro-batch,
#       accumulation; a layout knob given with -D in --model stays as given), checks that it keeps
#       G, and stops with status 2 naming the reason when the batch cannot be kept on M ranks —
#       before any training. --model is the model and the shardc options TRAINER was built with,
#       without its layout (-D dp / tp / pp ... and --world); --shardc PATH the compiler (default:
#       $SHARDC, else the shardc beside this script (an install's bin/), else the source tree's
#       build/shardc, else shardc on PATH).
#   --elastic M:TRAINER_M   runs TRAINER_M, a trainer built beforehand for M ranks, instead.
# Without a launcher (--np 1 and --launcher ""), TRAINER runs as one process.
# SIGTERM or SIGUSR1 to the launcher is forwarded to the trainer's ranks as SIGUSR1: they stop
# gracefully after a checkpoint of the step they are in, status 75, which the launcher returns
# without restarting (the next launch resumes from that checkpoint). --requeue (in a Slurm job:
# the --sbatch script's) then runs `scontrol requeue $SLURM_JOB_ID` and returns 0, so the job runs
# again and resumes there (the job must be requeueable: `#SBATCH --requeue`) — unless the launcher
# got SIGTERM, a cancel (`scancel JOBID`): then it returns 75 and the job stays cancelled. A SIGTERM
# that Slurm sent at the job's time limit (reached without --signal's warning) is told from a cancel
# by the job's Reason, which slurmctld sets before it signals: `scontrol show job` says
# Reason=TimeLimit (a cancel: Reason=None; Slurm 22.05); that stop is requeued like SIGUSR1's.
# --done-file PATH: before each attempt the launcher writes PATH ("waiting: ..."), and the trainer
# gets SHARDRT_DONE_FILE=PATH: its rank 0 stops at once with status 1 (not restarted) when it does
# not see that file (it runs where the launcher's directory is not: no shared file system), and
# overwrites it with "done: ..." once the run has completed; a status 0 without that is a failure
# (status 70, restarted): srun returns 0 when its tasks failed to launch ("task 0 launch failed",
# Slurm 22.05). PATH (relative: to the current directory, which srun's tasks start in) must be on a
# file system rank 0 and the launcher share; the --sbatch script gives .shardc-JOBID.done in the
# directory sbatch ran in. The launcher removes it after each attempt.
# The launcher's own flags are checked before anything starts: --np a positive integer, --delay
# seconds, --model and --shardc only with --elastic M (status 2 otherwise).
set -uo pipefail
np=1
max=3
delay=2
launcher="mpirun"
elastic=""
model=""
shardc=${SHARDC:-}
shardc_given=""
requeue=""
done_file=""
usage_text() { sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; }
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage_text; exit 0 ;;
    --requeue) requeue=1; shift ;;
    --np|--max-restarts|--delay|--launcher|--elastic|--model|--shardc|--done-file)
      [ $# -ge 2 ] || { echo "launch.sh: $1 needs a value (see --help)" >&2; exit 2; } ;;&
    --np) np=$2; shift 2 ;;
    --max-restarts) max=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --launcher) launcher=$2; shift 2 ;;
    --elastic) elastic=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --shardc) shardc=$2; shardc_given=$2; shift 2 ;;
    --done-file) done_file=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "launch.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ $# -ge 1 ] || { echo "usage: scripts/launch.sh [--np N] [--max-restarts K] [--requeue] [--delay S] [--launcher CMD] [--elastic M[:TRAINER_M]] [--model 'FILE.model [OPTIONS]'] [--shardc PATH] [--done-file PATH] -- TRAINER [FLAGS...]" >&2; exit 2; }
case $max in ''|*[!0-9]*) echo "launch.sh: --max-restarts '$max' is not a non-negative integer" >&2; exit 2 ;; esac
# (a bad --np reached mpirun; a bad --delay failed only at the first restart's sleep)
case $np in ''|*[!0-9]*|0|00*) echo "launch.sh: --np '$np' is not a positive integer" >&2; exit 2 ;; esac
case $delay in ''|.|*[!0-9.]*|*.*.*) echo "launch.sh: --delay '$delay' is not a number of seconds (2, 0.5)" >&2; exit 2 ;; esac
# --model and --shardc re-plan for --elastic M: without it they did nothing, without a word
if [ -n "$model" ] && [ -z "$elastic" ]; then echo "launch.sh: --model is for --elastic M (a re-plan for M ranks): give --elastic M, or leave --model out" >&2; exit 2; fi
if [ -n "$shardc_given" ] && { [ -z "$elastic" ] || [ "${elastic%%:*}" != "$elastic" ]; }; then
  echo "launch.sh: --shardc re-plans for --elastic M (with --model): leave it out${elastic:+ with --elastic $elastic, whose trainer is built}" >&2; exit 2
fi
trainer=$1
shift
# a trainer that is not there failed inside mpirun (status 1: "a user error, not restarting", or
# 132 and three restarts): said before anything starts
if ! command -v -- "$trainer" >/dev/null 2>&1 || [ -d "$trainer" ]; then
  echo "launch.sh: the trainer '$trainer' is not an executable file (shardc build ... -o TRAINER writes one)" >&2; exit 2
fi
for a in "$@"; do
  case $a in --resume|--resume=*) echo "launch.sh: the launcher passes --resume auto itself; drop $a" >&2; exit 2 ;; esac
done
elastic_np="" elastic_trainer=""
if [ -n "$elastic" ]; then
  elastic_np=${elastic%%:*}
  case $elastic_np in ''|*[!0-9]*|0) echo "launch.sh: --elastic '$elastic': want M (ranks, at least 1) or M:TRAINER_M" >&2; exit 2 ;; esac
  if [ "$elastic" != "$elastic_np" ]; then
    elastic_trainer=${elastic#*:}
    [ -z "$model" ] || { echo "launch.sh: --model is for --elastic M (a re-plan); --elastic $elastic names its trainer already" >&2; exit 2; }
  else
    [ -n "$model" ] || { echo "launch.sh: --elastic $elastic re-plans the model for $elastic rank(s): give --model \"FILE.model [shardc options]\" (what $trainer was built from, without its layout), or --elastic $elastic:TRAINER (built beforehand)" >&2; exit 2; }
    if [ -z "$shardc" ]; then
      here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
      for c in "$here/shardc" "$here/../build/shardc"; do [ -x "$c" ] && { shardc=$c; break; }; done
      [ -n "$shardc" ] || shardc=$(command -v shardc || true)
      [ -n "$shardc" ] || { echo "launch.sh: --elastic $elastic re-plans with shardc, which is neither beside this script, in the source tree's build/ nor on PATH: give --shardc PATH" >&2; exit 2; }
    fi
    # the global batch the restarts must keep: TRAINER's own (its --help says it)
    help=$("$trainer" --help 2>&1) || true
    gbatch=$(sed -n 's/.*; global batch \([0-9][0-9]*\) sequences per optimizer step.*/\1/p' <<<"$help")
    [ -n "$gbatch" ] || { echo "launch.sh: cannot read the global batch of '$trainer' from its --help (a trainer from this shardc says 'global batch N sequences'):" >&2; head -3 <<<"$help" >&2; exit 2; }
    read -r -a model_args <<<"$model"
    elastic_trainer=$trainer.world-$elastic_np
    echo "launch.sh: re-planning '$model' for $elastic_np rank(s) at the global batch of $trainer ($gbatch sequences): $shardc build ... --world $elastic_np -D batch=$gbatch --pick -o $elastic_trainer" >&2
    if ! "$shardc" build "${model_args[@]}" --world "$elastic_np" -D "batch=$gbatch" --pick -o "$elastic_trainer" >"$elastic_trainer.plan" 2>&1; then
      echo "launch.sh: --elastic $elastic_np: cannot re-plan '$model' for $elastic_np rank(s) keeping the global batch of $gbatch sequences (shardc's error below; the full output is in $elastic_trainer.plan): not starting" >&2
      grep -m 3 'error' "$elastic_trainer.plan" >&2 || tail -3 "$elastic_trainer.plan" >&2
      exit 2
    fi
    got=$("$elastic_trainer" --help 2>&1 | grep -o 'Compiled for .*' || true)
    case $got in
      "Compiled for $elastic_np rank(s) "*"; global batch $gbatch sequences "*) ;;
      *) echo "launch.sh: the re-planned trainer '$elastic_trainer' does not keep $elastic_np rank(s) and the global batch $gbatch: '$got' (a shardc bug: please report it)" >&2; exit 2 ;;
    esac
    echo "launch.sh: restarts after a failure run $elastic_trainer: ${got%.}" >&2
  fi
fi
read -r -a launch <<<"$launcher"
npflag=-np # mpirun's; srun counts tasks with -n
[ ${#launch[@]} -gt 0 ] && [ "$(basename "${launch[0]}")" = srun ] && npflag=-n
# SIGTERM / SIGUSR1 to the launcher (Slurm's warning before the time limit: `#SBATCH
# --signal=B:USR1@120` sends it to the batch script, which execs this) is forwarded as SIGUSR1 to
# the attempt running (mpirun and srun pass SIGUSR1 on to every rank; mpirun would take SIGTERM
# as an abort), whose trainer then stops gracefully: every rank finishes its step, a checkpoint of
# it is saved, and the trainer exits with status 75, which ends the launcher with 75 (the next
# run's --resume auto continues from that checkpoint).
attempt=0
child="" signalled="" termed=""
forward() {
  signalled=$1
  [ "$1" = TERM ] && termed=1
  [ -n "$child" ] && kill -USR1 "$child" 2>/dev/null
}
trap 'forward TERM' TERM
trap 'forward USR1' USR1
# (a command in the background ignores SIGINT: Ctrl-C reaches it as SIGTERM from here)
interrupted=""
trap 'interrupted=1; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null' INT
while :; do
  if [ -n "$done_file" ]; then
    # (rank 0 checks that it sees this file: the shared file system --done-file needs)
    printf 'waiting: attempt %d of launch.sh (pid %d) on %s\n' $((attempt + 1)) $$ "${HOSTNAME:-?}" >"$done_file" ||
      { echo "launch.sh: --done-file '$done_file': cannot write it" >&2; exit 2; }
    export SHARDRT_DONE_FILE=$done_file
  fi
  # in the background, so that a signal's trap runs at once (bash runs it only once a foreground
  # command has finished); wait returns early on a trap, so wait until the attempt is gone
  if [ ${#launch[@]} -gt 0 ]; then
    "${launch[@]}" "$npflag" "$np" "$trainer" "$@" --resume auto &
  else
    "$trainer" "$@" --resume auto &
  fi
  child=$!
  [ -n "$signalled" ] && kill -USR1 "$child" 2>/dev/null # (a signal between two attempts)
  while kill -0 "$child" 2>/dev/null; do wait "$child"; done
  wait "$child" # (its status, kept by bash however the loop ended)
  rc=$?
  child=""
  if [ -n "$done_file" ]; then
    if [ $rc -eq 0 ] && ! grep -q '^done:' "$done_file" 2>/dev/null; then
      echo "launch.sh: attempt $((attempt + 1)) ended with status 0 but its trainer did not complete (no $done_file from rank 0: srun returns 0 when its tasks failed to launch); counted as a failure (status 70)" >&2
      rc=70
    fi
    rm -f -- "$done_file"
  fi
  if [ -n "$interrupted" ]; then
    echo "launch.sh: interrupted (SIGINT): attempt $((attempt + 1)) ended with status $rc" >&2
    exit 130
  fi
  if [ $rc -eq 75 ]; then
    echo "launch.sh: the trainer stopped on a signal after saving a checkpoint (status 75): not restarting; --resume auto continues from it" >&2
    # SIGTERM to the launcher is a cancel (scancel JOBID signals every process of the job, the
    # batch script included): a real Slurm 22.05 requeued a job cancelled so, which then ran again.
    # Slurm sends the same SIGTERM at the time limit reached without --signal's warning; that one
    # sets the job's Reason=TimeLimit first (tests/slurm/real.sh), and is requeued. So are SIGUSR1
    # (the warning, or scancel --signal=USR1 --batch) and a stop the ranks alone were signalled for.
    if [ -n "$requeue" ] && [ -n "$termed" ]; then
      reason=""
      [ -n "${SLURM_JOB_ID:-}" ] &&
        reason=$(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | tr ' ' '\n' | sed -n 's/^Reason=//p')
      if [ "$reason" != TimeLimit ]; then
        echo "launch.sh: --requeue: not requeueing ${SLURM_JOB_ID:+job $SLURM_JOB_ID }after SIGTERM (a cancel: scancel; Slurm's Reason for the job: '${reason:-unknown}', not TimeLimit)" >&2
        exit 75
      fi
      echo "launch.sh: --requeue: the SIGTERM was Slurm's at the job's time limit (Reason=TimeLimit, no --signal warning before it): requeueing" >&2
    fi
    if [ -n "$requeue" ]; then
      [ -n "${SLURM_JOB_ID:-}" ] || { echo "launch.sh: --requeue: not in a Slurm job (no SLURM_JOB_ID)" >&2; exit 75; }
      # a real requeue ends the job at once: SIGTERM to every process of it, scontrol and this
      # script included, often before scontrol has returned its success (seen on Slurm 22.05:
      # "requeue failed" for a job requeued), so both ignore it while it runs (Slurm's SIGKILL
      # after KillWait still ends them)
      trap '' TERM USR1
      scontrol requeue "$SLURM_JOB_ID" || { echo "launch.sh: --requeue: scontrol requeue $SLURM_JOB_ID failed" >&2; exit 75; }
      echo "launch.sh: job $SLURM_JOB_ID requeued: it resumes from that checkpoint" >&2
      exit 0
    fi
    exit 75
  fi
  if [ -n "$signalled" ]; then
    echo "launch.sh: SIG$signalled: attempt $((attempt + 1)) ended with status $rc; not restarting" >&2
    exit $rc
  fi
  [ $rc -eq 0 ] && exit 0
  if [ $rc -eq 1 ]; then
    echo "launch.sh: the trainer stopped with status 1 (a user error or a diverged run): not restarting" >&2
    exit 1
  fi
  if [ "$attempt" -ge "$max" ]; then
    echo "launch.sh: attempt $((attempt + 1)) failed with status $rc; no restart left (--max-restarts $max)" >&2
    exit $rc
  fi
  attempt=$((attempt + 1))
  if [ -n "$elastic" ]; then
    np=$elastic_np
    trainer=$elastic_trainer
  fi
  echo "launch.sh: attempt $attempt failed with status $rc; restart $attempt of $max in ${delay} s on $np rank(s) from the newest checkpoint" >&2
  sleep "$delay"
done
