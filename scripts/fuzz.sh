#!/usr/bin/env bash
# Fuzzes the .model front end for longer than the test suite's 20 s.
# usage: scripts/fuzz.sh [SECONDS (default 600)] [JOBS (default 1)] [frontend|trainer (default frontend)]
# trainer: the trainer's flags and checkpoint loaders (tests/fuzz/fuzz_trainer.c; corpus in build-fuzz/corpus_trainer).
# Builds tests/fuzz/fuzz_frontend with clang (libFuzzer + ASan + UBSan) in build-fuzz/,
# seeds from models/ and tests/fuzz/seeds/, keeps the corpus in build-fuzz/corpus; crashes land in build-fuzz/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
secs="${1:-600}"
jobs="${2:-1}"
target="${3:-frontend}"
build="$root/build-fuzz"
cmake -S "$root" -B "$build" -G Ninja >/dev/null
if [ "$target" = trainer ]; then # the trainer's flags and checkpoint loaders (tests/fuzz/fuzz_trainer.c)
  ninja -C "$build" fuzz_trainer_build
  mkdir -p "$build/corpus_trainer" "$build/seeds_trainer"
  cd "$build"
  FUZZ_TRAINER_SEEDS="$build/seeds_trainer" ASAN_OPTIONS=detect_leaks=0 "$build/tests/fuzz/fuzz_trainer_bin" -runs=0 \
    "$build/seeds_trainer" >/dev/null 2>&1
  par=()
  [ "$jobs" -gt 1 ] && par=(-jobs="$jobs" -workers="$jobs")
  ASAN_OPTIONS=detect_leaks=0 exec "$build/tests/fuzz/fuzz_trainer_bin" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=2048 "${par[@]}" -dict="$root/tests/fuzz/trainer.dict" "$build/corpus_trainer" "$build/seeds_trainer"
fi
[ "$target" = frontend ] || { echo "fuzz.sh: TARGET is frontend or trainer, not '$target'" >&2; exit 2; }
ninja -C "$build" fuzz_frontend_build
mkdir -p "$build/corpus"
cd "$build"
par=()
[ "$jobs" -gt 1 ] && par=(-jobs="$jobs" -workers="$jobs")
exec "$build/tests/fuzz/fuzz_frontend_bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
  "${par[@]}" -dict="$root/tests/fuzz/model.dict" "$build/corpus" "$root/models" "$root/tests/fuzz/seeds"
