#!/usr/bin/env bash
# The test command: set up, build, and run every test (CTest). Extra arguments go to ctest
# (e.g. scripts/test.sh -L frontend).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cd build
ctest --output-on-failure -j 2 "$@"
