#!/usr/bin/env bash
# Fuzzes the .model front end for longer than the test suite's 20 s.
# usage: scripts/fuzz.sh [SECONDS (default 600)] [JOBS (default 1)]
# Builds tests/fuzz/fuzz_frontend with clang (libFuzzer + ASan + UBSan) in build-fuzz/,
# seeds from models/ and tests/fuzz/seeds/, keeps the corpus in build-fuzz/corpus; crashes land in build-fuzz/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
secs="${1:-600}"
jobs="${2:-1}"
build="$root/build-fuzz"
cmake -S "$root" -B "$build" -G Ninja >/dev/null
ninja -C "$build" fuzz_frontend_build
mkdir -p "$build/corpus"
cd "$build"
par=()
[ "$jobs" -gt 1 ] && par=(-jobs="$jobs" -workers="$jobs")
exec "$build/tests/fuzz/fuzz_frontend_bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
  "${par[@]}" -dict="$root/tests/fuzz/model.dict" "$build/corpus" "$root/models" "$root/tests/fuzz/seeds"
