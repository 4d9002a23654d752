#!/usr/bin/env bash
# Refreshes the golden files under tests/golden/ from the current compiler:
#   <model>.ir   `shardc plan models/<model>.model --ir` (the plan with its IR: IR, parameters, FLOPs, memory)
#   tiny.c       the C host program emitted for models/tiny.model
#   tests/passes/ir/<pass>/*.expected.ir and tests/passes/ir/errors/*.err   (ir_opt)
# Review the diff (git diff tests/golden tests/passes/ir) before committing: a refactor should change nothing.
# Usage: scripts/update-golden.sh [path/to/shardc [path/to/ir_opt]]    (default: build/shardc, build/tests/passes/ir_opt)
set -euo pipefail
cd "$(dirname "$0")/.."
shardc=${1:-build/shardc}
bash tests/golden/golden.sh "$shardc" update
# the IR-file pass tests and the IR reader's error messages (tests/passes/ir)
ir_opt=${2:-$(dirname "$shardc")/tests/passes/ir_opt}
bash tests/passes/ir_cases.sh "$ir_opt" update
bash tests/passes/ir_errors.sh "$ir_opt" update
