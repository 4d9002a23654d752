#!/usr/bin/env bash
# Fuzzes for longer than the test suite does (its fuzz_* tests: a few thousand inputs from a fresh
# corpus, the same everywhere; this: as long as asked, the corpus kept between runs).
# usage: scripts/fuzz.sh [SECONDS (default 600)] [JOBS (default 1)] [frontend|ir|trainer|plans (default frontend)] [FROM]
#   frontend  the .model front end (tests/fuzz/fuzz_frontend.c), seeded from models/ and tests/fuzz/seeds/
#   ir        the textual IR reader (tests/fuzz/fuzz_ir_read.c), seeded from the golden plans and the
#             IR-file pass tests
#   trainer   the trainer's flags and checkpoint loaders (tests/fuzz/fuzz_trainer.c), seeded by itself
#   plans     the plan space (tests/passes/fuzz_plans.c): seeded models and plans through every pass, each refused
#             with located errors or equal to one rank in the interpreter; not libFuzzer: seeds from FROM
#             (default 1000000: past the test suite's) on, as many as SECONDS allow, JOBS processes each on its
#             own seed range (FROM + job x 10^8).
#             Built with ASan and UBSan (SHARDC_SANITIZE) in build-fuzz-plans/, logs there: fuzz_plans.JOB.log
# Builds the fuzzer with clang (libFuzzer + ASan + UBSan) in build-fuzz/; the corpus is build-fuzz/corpus
# (frontend), corpus_ir or corpus_trainer; crashes land in build-fuzz/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
secs="${1:-600}"
jobs="${2:-1}"
target="${3:-frontend}"
build="$root/build-fuzz"
par=()
[ "$jobs" -gt 1 ] && par=(-jobs="$jobs" -workers="$jobs")
if [ "$target" = plans ]; then
  build="$root/build-fuzz-plans"
  # gcc, as the main build (clang refuses the runtime's gcc pragmas and vectorize hints under -Werror, which
  # fuzz_plans builds through codegen's dependency); the warnings -O2 with the sanitizers invents stay warnings
  nowerr="-Wno-error=format-truncation -Wno-error=stringop-overflow -Wno-error=maybe-uninitialized -Wno-error=restrict"
  nowerr="$nowerr -Wno-error=array-bounds -Wno-error=stringop-truncation -Wno-error=format-overflow"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_FLAGS="$nowerr" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDC_SANITIZE=ON \
    -DSHARDC_WITH_CUDA=OFF >/dev/null
  ninja -C "$build" fuzz_plans
  export ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  pids=()
  from="${4:-1000000}"
  for j in $(seq 0 $((jobs - 1))); do # job j: seeds FROM + j x 10^8 on
    "$build/tests/passes/fuzz_plans" --from $((from + j * 100000000)) --seconds "$secs" >"$build/fuzz_plans.$j.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  for j in $(seq 0 $((jobs - 1))); do
    grep -E '^FAIL seed [0-9]+: [^d]|^fuzz_plans:|^failed seeds' "$build/fuzz_plans.$j.log" || true
  done
  [ "$rc" = 0 ] || echo "fuzz.sh: failures: their reproducers in $build/fuzz_plans.*.log (fuzz_plans --seed N runs one)" >&2
  exit "$rc"
fi
case "$target" in
  frontend) bin=fuzz_frontend corpus=corpus dict=model.dict seeds=("$root/models" "$root/tests/fuzz/seeds") ;;
  ir) bin=fuzz_ir_read corpus=corpus_ir dict=ir.dict seeds=("$root/tests/golden" "$root/tests/passes/ir") ;;
  trainer) bin=fuzz_trainer corpus=corpus_trainer dict=trainer.dict seeds=("$build/seeds_trainer") ;;
  *) echo "fuzz.sh: TARGET is frontend, ir, trainer or plans, not '$target'" >&2; exit 2 ;;
esac
cmake -S "$root" -B "$build" -G Ninja >/dev/null
ninja -C "$build" "${bin}_build"
mkdir -p "$build/$corpus"
cd "$build"
if [ "$target" = trainer ]; then # the harness writes its seeds (a flag list, a sharded rank file, an index)
  # leaks checked: a user error frees what the loaders held (runtime/train/files.h rt_on_error)
  export ASAN_OPTIONS=detect_leaks=1
  mkdir -p "$build/seeds_trainer"
  FUZZ_TRAINER_SEEDS="$build/seeds_trainer" "$build/tests/fuzz/${bin}_bin" -runs=0 "$build/seeds_trainer" >/dev/null 2>&1
fi
exec "$build/tests/fuzz/${bin}_bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 "${par[@]}" \
  -dict="$root/tests/fuzz/$dict" "$build/$corpus" "${seeds[@]}"
