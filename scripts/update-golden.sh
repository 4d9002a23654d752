#!/usr/bin/env bash
# Refreshes the golden files under tests/golden/ from the current compiler:
#   <model>.ir   `shardc plan models/<model>.model` (the --dump-ir text: IR, parameters, FLOPs, memory)
#   tiny.c       the C host program emitted for models/tiny.model
# Review the diff (git diff tests/golden) before committing: a refactor should change nothing.
# Usage: scripts/update-golden.sh [path/to/shardc]    (default: build/shardc)
set -euo pipefail
cd "$(dirname "$0")/.."
shardc=${1:-build/shardc}
exec bash tests/golden/golden.sh "$shardc" update
