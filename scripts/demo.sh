#!/usr/bin/env bash
# The demo: sets up, builds, and runs shardc on the bundled models.
# Today it compiles the bundled models and prints their plans (the trainer lands with codegen).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
for m in models/tiny.model models/gpt2-124m.model; do
  echo "== shardc plan $m"
  ./build/shardc plan "$m" | sed -n '/^# parameters/,$p' | head -40
done
