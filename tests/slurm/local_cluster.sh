#!/usr/bin/env bash
# tests/slurm/local_cluster.sh {start|stop|status} — a one-node Slurm cluster on localhost, for
# tests/slurm/real.sh (on demand: not in ctest, not in scripts/setup.sh). Run as root in a
# container without systemd, after
#   apt-get install -y slurmctld slurmd slurm-client munge     (Debian bookworm: Slurm 22.05)
# start: munged (the packaged key /etc/munge/munge.key, as the munge user), a slurm.conf in
# $SHARDC_SLURM_DIR (default /tmp/shardc-slurm: also the state, spool and logs), slurmctld -D and
# slurmd -D in the background, then waits until the node is idle. Clients find the cluster
# through SLURM_CONF=$SHARDC_SLURM_DIR/slurm.conf (printed; real.sh sets it itself).
# The node is NodeName=localhost with CPUs=$(nproc); proctrack/linuxproc and task/none (no cgroups:
# a container's are not ours), select/cons_tres by core, JobRequeue=1 (a job may be requeued),
# ReturnToService=2, and the partition's MaxTime unlimited (real.sh asks for minutes).
# stop: ends those daemons (by the pid files written here) and nothing else.
set -euo pipefail
dir=${SHARDC_SLURM_DIR:-/tmp/shardc-slurm}
conf=$dir/slurm.conf
export SLURM_CONF=$conf
die() { echo "local_cluster.sh: $*" >&2; exit 1; }

stop_pid() { # stop_pid NAME PIDFILE: TERM, then KILL after 10 s
  local name=$1 f=$2 pid
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    echo "local_cluster.sh: stopped $name (pid $pid)"
  fi
  rm -f "$f"
}

stop() {
  stop_pid slurmd "$dir/slurmd.pid"
  stop_pid slurmctld "$dir/slurmctld.pid"
  stop_pid munged "$dir/munged.pid"
}

start() {
  [ "$(id -u)" = 0 ] || die "run it as root (the daemons and SlurmUser=root)"
  local b
  for b in munged slurmctld slurmd sbatch scontrol sinfo; do
    command -v "$b" >/dev/null || die "$b is not installed: apt-get install -y slurmctld slurmd slurm-client munge"
  done
  if [ -s "$dir/slurmctld.pid" ] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
    die "already running (SLURM_CONF=$conf); '$0 stop' first"
  fi
  mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
  chown munge:munge "$dir/munge"
  # munged: the packaged key and the default socket (/run/munge), which auth/munge uses
  mkdir -p /run/munge
  chown munge:munge /run/munge
  [ -s /etc/munge/munge.key ] || die "/etc/munge/munge.key is missing (the munge package creates it)"
  runuser -u munge -- munged --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed" || die "munged did not start: $(tail -3 "$dir/munge/munged.log" 2>/dev/null)"
  cp "$dir/munge/munged.pid" "$dir/munged.pid"
  munge -n | unmunge >/dev/null || die "munge does not answer"
  local cpus
  cpus=$(nproc)
  cat >"$conf" <<EOF
# written by tests/slurm/local_cluster.sh: a one-node cluster on localhost
ClusterName=shardc
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SchedulerType=sched/backfill
ReturnToService=2
JobRequeue=1
KillWait=10
MinJobAge=300
InactiveLimit=0
Waittime=0
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  slurmctld -D -f "$conf" >>"$dir/slurmctld.out" 2>&1 &
  slurmd -D -f "$conf" -N localhost >>"$dir/slurmd.out" 2>&1 &
  local state=""
  for _ in $(seq 60); do
    state=$(sinfo -h -N -o %t 2>/dev/null || true)
    [ "$state" = idle ] && break
    sleep 0.5
  done
  [ "$state" = idle ] || {
    tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" "$dir/slurmctld.out" "$dir/slurmd.out" >&2 2>/dev/null || true
    stop
    die "the node did not come up idle (state '$state')"
  }
  echo "local_cluster.sh: Slurm $(slurmd -V | awk '{print $2}') up on localhost ($cpus CPUs): export SLURM_CONF=$conf"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) SLURM_CONF=$conf sinfo -N 2>&1 || true ;;
  *) echo "usage: $0 {start|stop|status}" >&2; exit 2 ;;
esac
