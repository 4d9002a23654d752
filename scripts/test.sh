#!/usr/bin/env bash
# The test command: set up, build, and run every test (CTest). Extra arguments go to ctest
# (e.g. scripts/test.sh -L frontend). At the end: the 10 slowest tests of this run (from ctest's
# output, also kept in build/Testing/ctest.log), so each CI log shows where its time goes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Two tests at a time on as many cores, trainers of several ranks oversubscribed: OpenMP threads that wait for
# work sleep instead of spinning on a core another test needs (GOMP spins by default: a tenth of an emulated
# trainer's CPU time was its BLAS threads' spinning)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
cd build
mkdir -p Testing
rc=0
ctest --output-on-failure -j 2 "$@" 2>&1 | tee Testing/ctest.log || rc=$?
# "  3/181 Test  #14: name ......   Passed   12.34 sec" -> "  12.34 s  name  (Passed)"
echo "The 10 slowest tests:"
sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) [ .*]*(.+[^ ]) +([0-9.]+) sec$/\3 \1 \2/p' Testing/ctest.log |
  sort -rn | awk 'NR <= 10 {printf "  %8.2f s  %s  (%s)\n", $1, $2, $3}' # (awk reads it all: head would leave sort a SIGPIPE, 141 under pipefail)
exit "$rc"
