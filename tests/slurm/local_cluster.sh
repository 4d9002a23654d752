#!/usr/bin/env bash
# tests/slurm/local_cluster.sh {start [NODES]|stop|status} — a one-node Slurm cluster on localhost,
# for tests/slurm/real.sh (on demand: not in ctest, not in scripts/setup.sh); `start 2` (or more)
# brings up NODES nodes on this one host instead, for tests/slurm/nodes.sh. Run as root in a
# container without systemd, after
#   apt-get install -y slurmctld slurmd slurm-client munge     (Debian bookworm: Slurm 22.05)
# start: munged (the packaged key /etc/munge/munge.key, as the munge user), a slurm.conf in
# $SHARDC_SLURM_DIR (default /tmp/shardc-slurm: also the state, spool and logs), slurmctld -D and
# slurmd -D in the background, then waits until the node is idle. Clients find the cluster
# through SLURM_CONF=$SHARDC_SLURM_DIR/slurm.conf (printed; real.sh sets it itself).
# The node is NodeName=localhost with CPUs=$(nproc); proctrack/linuxproc and task/none (no cgroups:
# a container's are not ours), select/cons_tres by core, JobRequeue=1 (a job may be requeued),
# ReturnToService=2, and the partition's MaxTime unlimited (real.sh asks for minutes).
# NODES > 1: one slurmd per node on this host, as Slurm's multiple-slurmd support allows (a build
# with it: `scontrol show config` says MULTIPLE_SLURMD = Yes, as Debian's 22.05 does): nodes
# node1..nodeN, each NodeHostname=localhost with a port of its own (6820 + i) and $(nproc)/NODES
# CPUs (at least 1), `slurmd -N nodeI`; the spool, pid and log files per node (%n).
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
  local f
  stop_pid slurmd "$dir/slurmd.pid"
  for f in "$dir"/slurmd-node*.pid; do
    if [ -e "$f" ]; then stop_pid "slurmd $(basename "$f" .pid)" "$f"; fi
  done
  stop_pid slurmctld "$dir/slurmctld.pid"
  stop_pid munged "$dir/munged.pid"
}

start() {
  local nodes=${1:-1}
  case $nodes in ''|*[!0-9]*|0) die "start NODES: '$nodes' is not a positive number of nodes" ;; esac
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
  local cpus names i per="" # per: the per-node files' suffix
  cpus=$(nproc)
  if [ "$nodes" -gt 1 ]; then
    per=-%n
    cpus=$((cpus / nodes))
    [ "$cpus" -ge 1 ] || cpus=1
  fi
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
SlurmdSpoolDir=$dir/spool$per
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd$per.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd$per.log
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
EOF
  if [ "$nodes" = 1 ]; then
    names=localhost
    echo "NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN" >>"$conf"
  else
    names=""
    for i in $(seq "$nodes"); do
      names+=${names:+,}node$i
      mkdir -p "$dir/spool-node$i"
      echo "NodeName=node$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((6820 + i)) CPUs=$cpus State=UNKNOWN" >>"$conf"
    done
  fi
  echo "PartitionName=debug Nodes=$names Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO" >>"$conf"
  slurmctld -D -f "$conf" >>"$dir/slurmctld.out" 2>&1 &
  if [ "$nodes" = 1 ]; then
    slurmd -D -f "$conf" -N localhost >>"$dir/slurmd.out" 2>&1 &
  else
    # each slurmd reads the same slurm.conf from a folder of its own, beside an mpi.conf of its own:
    # PMIx's client folder is /tmp/spmix_appdir_UID_JOB.STEP on every node (22.05), which the second
    # node's step could not create ("File exists": its srun's tasks failed to launch)
    for i in $(seq "$nodes"); do
      mkdir -p "$dir/node$i" "$dir/tmp-node$i"
      cp "$conf" "$dir/node$i/slurm.conf"
      echo "PMIxCliTmpDirBase=$dir/tmp-node$i" >"$dir/node$i/mpi.conf"
      slurmd -D -f "$dir/node$i/slurm.conf" -N "node$i" >>"$dir/slurmd-node$i.out" 2>&1 &
    done
  fi
  local state="" want
  want=$(for i in $(seq "$nodes"); do echo idle; done)
  for _ in $(seq 60); do
    state=$(sinfo -h -N -o %t 2>/dev/null || true)
    [ "$state" = "$want" ] && break
    sleep 0.5
  done
  [ "$state" = "$want" ] || {
    tail -5 "$dir"/slurmctld.log "$dir"/slurmd*.log "$dir"/slurmctld.out "$dir"/slurmd*.out >&2 2>/dev/null || true
    stop
    die "the node(s) did not come up idle (state '$state')"
  }
  echo "local_cluster.sh: Slurm $(slurmd -V | awk '{print $2}') up on localhost: node(s) $names, $cpus CPU(s) each: export SLURM_CONF=$conf"
}

case ${1:-} in
  start) start "${2:-1}" ;;
  stop) stop ;;
  status) SLURM_CONF=$conf sinfo -N 2>&1 || true ;;
  *) echo "usage: $0 {start [NODES]|stop|status}" >&2; exit 2 ;;
esac
