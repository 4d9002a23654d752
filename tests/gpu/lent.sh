#!/usr/bin/env bash
# tests/gpu/lent.sh — a lent GPU machine's whole session in ONE device call (the device tool's budget is about
# 15 minutes a session, a machine's start about 40 s of it, and it hands back at most 8 files from OUT):
#   - issue 15's bubble bench (bench/pp_bubble_packed.sh STEPS ROUNDS, from .ppb) on the second half of the cores,
#     in the background: its output is OUT/ppb.tar.gz (one file);
#   - issue 17's parts (tests/gpu/session.sh OUT BUDGET) on the first half: OUT/summary.txt and OUT/logs.tar.gz;
#   then waits for both (the bench stops starting runs after its own budget: BUDGET=110 s by default there).
# Build and pack first, here:
#   bash scripts/build.sh && LLMC=/path/to/train_gpt2cu tests/gpu/pack.sh build && bash bench/pp_bubble_pack.sh
# then, carrying .gpu and .ppb:  tests/gpu/lent.sh [BUDGET=540]   (run's timeout_s: BUDGET + 40)
# Without .ppb (or with under 16 cores) only session.sh runs, on every core.
set -uo pipefail
cd "$(dirname "$0")/../.."
budget=${1:-540}
out=${OUT:-.gpu/out}
mkdir -p "$out"
source .gpu/env.sh
n=$(nproc)
half=$((n / 2))
bench=
if [ -d .ppb ] && [ "$n" -ge 16 ]; then
  OUT=$out taskset -c "$half-$((n - 1))" bench/pp_bubble_packed.sh 8 3 > /dev/null 2>&1 &
  bench=$!
  taskset -c "0-$((half - 1))" tests/gpu/session.sh "$out" "$budget"
else
  tests/gpu/session.sh "$out" "$budget"
fi
if [ -n "$bench" ]; then
  wait "$bench"
  echo "pp_bubble_packed.sh: exit $? ($out/ppb.tar.gz)"
  tar -xzOf "$out/ppb.tar.gz" ./pp_bubble_packed.log 2>/dev/null | tail -25
fi
