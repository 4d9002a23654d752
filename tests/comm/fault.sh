#!/bin/sh
# tests/comm/fault.sh MODE REGEX NP CMD... — runs a failing multi-rank job and checks that it
# ends non-zero within 30 s with output matching REGEX (extended grep).
#   MODE plain: just run; MODE kill: kill -9 the rank whose pid lands in $SHARDRT_TEST_PIDFILE;
#   MODE killeach: as kill, and every one of the NP-1 surviving ranks must print a matching line
#   (for `mpirun --enable-recovery`, which does not end the job itself and exits 0); MODE any:
#   as plain, whatever the exit status (--enable-recovery: the matching line comes from a survivor);
#   MODE crashlost: as killeach, but first SIGSEGV to rank 2 (pid in $SHARDRT_TEST_PIDFILE.2), then
#   0.2 s later kill -9 rank 1: the crash guard (runtime/comm/watchdog.c) must name the loss, one line
#   saying "stopped on SIGSEGV"; MODE crash: SIGSEGV to rank 2 alone: no peer lost, the signal goes on
#   (the job ends non-zero, output matching REGEX, and rank 2 says no peer was lost; the others may see
#   rank 2's death before mpirun ends them, and say so — rank 2, and only rank 2, lost).
mode=$1; regex=$2; np=$3; shift 3
out=$(mktemp); pidfile=$(mktemp -u)
export SHARDRT_TEST_PIDFILE=$pidfile
start=$(date +%s)
"$@" >"$out" 2>&1 &
job=$!
if [ "$mode" != plain ] && [ "$mode" != any ]; then
  i=0
  while { [ ! -s "$pidfile" ] || { [ "${mode#crash}" != "$mode" ] && [ ! -s "$pidfile.2" ]; }; } && [ $i -lt 300 ]; do
    sleep 0.1; i=$((i + 1))
  done
  if [ ! -s "$pidfile" ]; then echo "fault.sh: the job never wrote $pidfile"; kill $job; cat "$out"; exit 1; fi
  victim=$(cat "$pidfile")
  if [ "${mode#crash}" != "$mode" ]; then
    [ -s "$pidfile.2" ] || { echo "fault.sh: the job never wrote $pidfile.2"; kill $job; cat "$out"; exit 1; }
    echo "fault.sh: kill -SEGV $(cat "$pidfile.2")"
    kill -SEGV "$(cat "$pidfile.2")"
  fi
  if [ "$mode" != crash ]; then
    [ "$mode" = crashlost ] && sleep 0.2
    echo "fault.sh: kill -9 $victim"
    kill -9 "$victim"
  fi
fi
# Wait at most 30 s for the job to end.
i=0
while kill -0 $job 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
if kill -0 $job 2>/dev/null; then
  echo "fault.sh: FAIL: still running after 30 s"; kill -9 $job; cat "$out"; rm -f "$out" "$pidfile" "$pidfile.2"; exit 1
fi
wait $job; rc=$?
end=$(date +%s)
cat "$out"
echo "fault.sh: exit status $rc after $((end - start)) s"
status=0
if [ "$mode" = killeach ] || [ "$mode" = crashlost ]; then
  n=$(grep -Ec "$regex" "$out")
  [ "$n" -eq $((np - 1)) ] || { echo "fault.sh: FAIL: $n lines match /$regex/, want $((np - 1))"; status=1; }
  if [ "$mode" = crashlost ]; then
    grep -Eq "$regex.*stopped on SIGSEGV" "$out" || { echo "fault.sh: FAIL: no peer-loss line says 'stopped on SIGSEGV'"; status=1; }
  fi
else
  [ "$mode" = any ] || [ $rc -ne 0 ] || { echo "fault.sh: FAIL: exit status 0"; status=1; }
  grep -Eq "$regex" "$out" || { echo "fault.sh: FAIL: no line matches /$regex/"; status=1; }
  if [ "$mode" = crash ] && grep "peer lost" "$out" | grep -Evq "^shardrt: rank [013]: peer lost: rank 2 [(]"; then
    echo "fault.sh: FAIL: a peer other than the crashed rank 2 is said lost, or rank 2 says one is"; status=1
  fi
fi
rm -f "$out" "$pidfile" "$pidfile.2"
exit $status
