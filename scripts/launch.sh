#!/usr/bin/env bash
# scripts/launch.sh — starts a shardc trainer and restarts it after a failure, from the newest
# complete checkpoint, up to --max-restarts times.
#
#   scripts/launch.sh [--np N] [--max-restarts K] [--delay S] [--launcher "mpirun ..."] -- TRAINER [FLAGS...]
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
# Elastic restarts: checkpoints resume under any layout, so a restart may use a trainer compiled for
# another world size (`shardc build ... --world M`, the same global batch): --elastic "M:TRAINER_M"
# makes every restart after the first failure run TRAINER_M on M ranks instead (say, after losing
# a node). Without a launcher (--np 1 and --launcher ""), TRAINER runs as one process.
set -uo pipefail
np=1
max=3
delay=2
launcher="mpirun"
elastic=""
while [ $# -gt 0 ]; do
  case $1 in
    --np) np=$2; shift 2 ;;
    --max-restarts) max=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --launcher) launcher=$2; shift 2 ;;
    --elastic) elastic=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "launch.sh: unknown option '$1' (see the top of scripts/launch.sh)" >&2; exit 2 ;;
  esac
done
[ $# -ge 1 ] || { echo "usage: scripts/launch.sh [--np N] [--max-restarts K] [--delay S] [--launcher CMD] [--elastic M:TRAINER] -- TRAINER [FLAGS...]" >&2; exit 2; }
case $max in ''|*[!0-9]*) echo "launch.sh: --max-restarts '$max' is not a non-negative integer" >&2; exit 2 ;; esac
trainer=$1
shift
for a in "$@"; do
  case $a in --resume|--resume=*) echo "launch.sh: the launcher passes --resume auto itself; drop $a" >&2; exit 2 ;; esac
done
read -r -a launch <<<"$launcher"
npflag=-np # mpirun's; srun counts tasks with -n
[ ${#launch[@]} -gt 0 ] && [ "$(basename "${launch[0]}")" = srun ] && npflag=-n
attempt=0
while :; do
  if [ ${#launch[@]} -gt 0 ]; then
    "${launch[@]}" "$npflag" "$np" "$trainer" "$@" --resume auto
  else
    "$trainer" "$@" --resume auto
  fi
  rc=$?
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
    np=${elastic%%:*}
    trainer=${elastic#*:}
  fi
  echo "launch.sh: attempt $attempt failed with status $rc; restart $attempt of $max in ${delay} s on $np rank(s) from the newest checkpoint" >&2
  sleep "$delay"
done
