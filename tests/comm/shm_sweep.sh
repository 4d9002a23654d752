#!/bin/sh
# tests/comm/shm_sweep.sh CMD... — the libfabric shm regions that killed processes leave in /dev/shm
# (kill -9, the OOM killer: nothing runs in the process to remove them) are removed by the next job on
# the host (runtime/comm/fabric.c, rt_fabric_sweep_shm), and only those. CMD runs `test_comm kill` on
# 2 ranks (rank 1 writes its pid to $SHARDRT_TEST_PIDFILE after 20 all-reduces, then all-reduces until
# killed). Before it starts, regions are made by hand, each with a name as the runtime writes them:
#   stale   a dead pid, an hour old, no lock             -> removed
#   locked  a dead pid, an hour old, a shared flock held  -> kept (a live owner in another pid namespace)
#   fresh   a dead pid, made now                         -> kept (a region being made: 60 s of grace)
#   live    this script's pid, an hour old               -> kept (a runtime that took no lock)
#   other   not a name the runtime writes                -> kept
# and while the job runs, rank 1's own region must be locked (flock -n -x on it fails).
pidfile=$(mktemp -u)
export SHARDRT_TEST_PIDFILE=$pidfile
sh -c 'exit 0' &
dead=$!
wait $dead
now=$(date +%s)
old=$(printf %x $(((now - 3600) * 1000000000)))
new=$(printf %x $((now * 1000000000)))
stale=/dev/shm/shardrt-$dead-$old-0
locked=/dev/shm/shardrt-$dead-$old-1
fresh=/dev/shm/shardrt-$dead-$new-0
live=/dev/shm/shardrt-$$-$old-0
other=/dev/shm/shardrt-$dead-$old-0x
for f in $stale $locked $fresh $live $other; do head -c 4096 /dev/zero >"$f"; done
exec 9<"$locked" # (this script holds the lock: no process outlives it)
flock -s 9
job=
cleanup() {
  [ -n "$job" ] && kill -9 "$job" 2>/dev/null
  rm -f "$stale" "$locked" "$fresh" "$live" "$other" "$pidfile"
}
trap cleanup EXIT
"$@" >/dev/null 2>&1 9<&- &
job=$!
w=0
while [ ! -s "$pidfile" ] && [ $w -lt 300 ]; do sleep 0.1; w=$((w + 1)); done
[ -s "$pidfile" ] || { echo "shm_sweep.sh: FAIL: rank 1 wrote no pid in 30 s"; exit 1; }
rank1=$(cat "$pidfile")
status=0
[ ! -e "$stale" ] || { echo "shm_sweep.sh: FAIL: the stale region $stale is still there"; status=1; }
for f in $locked $fresh $live $other; do
  [ -e "$f" ] || { echo "shm_sweep.sh: FAIL: $f was removed"; status=1; }
done
own=$(find /dev/shm -maxdepth 1 -name "shardrt-$rank1-*" | head -1)
if [ -z "$own" ]; then
  echo "shm_sweep.sh: FAIL: rank 1 (pid $rank1) has no region in /dev/shm"
  status=1
elif flock -n -x "$own" true; then
  echo "shm_sweep.sh: FAIL: rank 1's region $own is not locked while it runs"
  status=1
fi
kill -9 "$rank1"
wait "$job" 2>/dev/null
job=
rm -f "$own" # (what kill -9 left: a later job sweeps such a region after its minute of grace)
[ $status -ne 0 ] || echo "shm_sweep.sh: the stale region removed; the locked, fresh, live and other ones kept; the job's own locked"
exit $status
