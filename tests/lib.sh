# tests/lib.sh — the preamble the test scripts share (tests/e2e/*.sh, the golden and IR scripts of
# tests/golden and tests/passes; tests/codegen/lib.sh builds on it). A script sources it first, then
# names its arguments:
#   source "$(dirname "$0")/../lib.sh"
#   shardc=$(abspath "$1")
# It stops the script on the first error (set -euo pipefail), goes to the repository root, makes a
# temporary folder $t (removed on exit; a script with its own EXIT trap removes it there), lets
# mpirun run as root and oversubscribe, and defines:
#   abspath PATH   PATH as the script was given it (relative to where it started), made absolute
#   mpi            the mpirun command, an array: "${mpi[@]}" -np 2 ...
#   fail MSG...    prints "FAIL: MSG" and exits 1
#   losses LOG     the losses of a trainer's JSONL log, one a line
#   corpus BYTES   a text corpus of BYTES bytes in $t/data.txt (scripts/gen_corpus.sh, seed 3)
#   expect_shardc WANT_EXIT NEEDLE... -- ARGS...
#                  `$shardc ARGS` must exit WANT_EXIT and its stderr (stdout too where the script set
#                  expect_stdout=1) hold each NEEDLE, a fixed string; else it prints FAIL lines and
#                  the output, sets status=1 and returns 1 (a script that collects its failures in
#                  $status runs with set +e: `status=0`, `exit $status`). The output is left in $out.
# Sourced twice (a script, then tests/codegen/lib.sh), it does this once.
# shellcheck shell=bash disable=SC2034 # (the variables are the sourcing script's)
[ -z "${SHARDC_TESTS_LIB:-}" ] || return 0
SHARDC_TESTS_LIB=1
set -euo pipefail
tests_start_dir=$PWD
abspath() { (cd "$tests_start_dir" && realpath "$1"); }
cd "$(dirname "${BASH_SOURCE[0]}")/.."
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpi=(mpirun --mca pml ob1)
fail() {
  echo "FAIL: $*"
  exit 1
}
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
corpus() { bash scripts/gen_corpus.sh "$t/data.txt" "$1" 3 >/dev/null; }
# held_ranks LOG STEP N: wait (up to 60 s) until N ranks say SHARDRT_FAULT_WAIT holds them before STEP in LOG
held_ranks() {
  for _ in $(seq 600); do
    [ "$(grep -c "SHARDRT_FAULT_WAIT: waiting for a signal before step $2" "$1")" = "$3" ] && return 0
    sleep 0.1
  done
  fail "$1: $3 ranks not held before step $2 within 60 s"
}
expect_shardc() {
  local want=$1 needles=() n rc ok=0
  shift
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  if [ "${expect_stdout:-0}" = 1 ]; then
    out=$("$shardc" "$@" 2>&1) && rc=0 || rc=$?
  else
    out=$("$shardc" "$@" 2>&1 >/dev/null) && rc=0 || rc=$?
  fi
  if [ "$rc" != "$want" ]; then echo "FAIL: shardc $* exited $rc, want $want"; tail -40 <<<"$out"; status=1; return 1; fi
  for n in "${needles[@]}"; do
    grep -qF -- "$n" <<<"$out" || { echo "FAIL: shardc $*: no '$n' in:"; tail -40 <<<"$out"; status=1; ok=1; }
  done
  return $ok
}
