#!/bin/sh
# tests/comm/shm_leak.sh NP CMD... — runs a job whose rank 0 exits 1 (a user error) while the
# others wait in a collective (test_comm usererr), then checks that no rank left its libfabric shm
# region (/dev/shm/shardrt-<pid>-*) behind: the one that exited, and the ones mpirun then ended.
# Only regions made since the job started count: a region an earlier job's kill -9 left (nothing can
# remove it) may carry the pid a rank of this job reuses.
np=$1; shift
pidfile=$(mktemp -u)
since=$(mktemp)
trap 'rm -f "$since"' EXIT
sleep 0.01 # (the regions' times are after the marker's)
export SHARDRT_TEST_PIDFILE=$pidfile
timeout 60 "$@" >/dev/null 2>&1
rc=$?
[ $rc -ne 0 ] || { echo "shm_leak.sh: FAIL: the job exited 0"; exit 1; }
sleep 0.5
status=0
for r in $(seq 0 $((np - 1))); do
  [ -s "$pidfile.$r" ] || { echo "shm_leak.sh: FAIL: rank $r wrote no pid"; status=1; continue; }
  pid=$(cat "$pidfile.$r")
  # a rank mpirun ended may still be exiting (on a loaded machine, past mpirun's own exit): what it
  # leaves counts once it is gone (up to 10 s)
  w=0
  while kill -0 "$pid" 2>/dev/null && [ $w -lt 100 ]; do sleep 0.1; w=$((w + 1)); done
  left=$(find /dev/shm -maxdepth 1 -name "shardrt-$pid-*" -newer "$since" 2>/dev/null)
  if [ -n "$left" ]; then echo "shm_leak.sh: FAIL: rank $r (pid $pid) left $left"; status=1; fi
  rm -f "$pidfile.$r"
done
[ $status -ne 0 ] || echo "shm_leak.sh: no shm region left by $np ranks (exit status $rc)"
exit $status
