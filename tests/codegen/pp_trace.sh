#!/usr/bin/env bash
# The trainer's --trace FILE (runtime/ops/trace.h, runtime/train/trace_out.c): the measured
# timeline as Chrome trace / Perfetto JSON, checked by pp_trace.py (valid JSON, a process per rank,
# the steps in order, each stage's F / B instructions in its schedule's order inside their step,
# without overlap, then the optimizer; its sends / receives among the communication spans):
# tiny with 4 layers, pp2 1F1B (4 micro-batches), pp2 x dp2 GPipe (2 micro-batches) and one rank
# (steps and collectives only). Tracing changes nothing: the traced run's losses are the untraced
# run's, bit for bit. The checker rejects a wrong order, and an unwritable FILE is refused before
# training (label mpi).
set -euo pipefail
shardc=$(realpath "$1")
cd "$(dirname "$0")/../.."
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh
run=(--data "$t/data.txt" --steps 3 --eval-every 0 --val-batches 1 --save-to "$t/ck")
check=tests/codegen/pp_trace.py
m=(models/tiny.model -D seq=64 -D layers=4 -D batch=8)
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=1 -D pp=2 --world 2 -o "$t/pp2" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=2 -D dp=2 -D pp=2 -D schedule=gpipe --world 4 -o "$t/pp2dp2" 2>/dev/null
"$shardc" build "${m[@]}" -D micro_batch=8 --world 1 -o "$t/one" 2>/dev/null

"${mpi[@]}" -np 2 "$t/pp2" "${run[@]}" --log "$t/plain.jsonl" >/dev/null
"${mpi[@]}" -np 2 "$t/pp2" "${run[@]}" --log "$t/traced.jsonl" --trace "$t/pp2.json" >/dev/null
if [[ "$(losses "$t/plain.jsonl")" != "$(losses "$t/traced.jsonl")" ]]; then
  echo "FAIL: the traced pp2 run's losses differ from the untraced run's"
  exit 1
fi
python3 "$check" "$t/pp2.json" 2 2 3 "F0 F1 B0 F2 B1 F3 B2 B3" "F0 B0 F1 B1 F2 B2 F3 B3"
if python3 "$check" "$t/pp2.json" 2 2 3 "F0 F1 F2 F3 B0 B1 B2 B3" "F0 B0 F1 B1 F2 B2 F3 B3" >/dev/null; then
  echo "FAIL: the checker accepted GPipe's order for a 1F1B trace"
  exit 1
fi
ls "$t"/pp2.json.rank* >/dev/null 2>&1 && { echo "FAIL: part files left beside the trace"; exit 1; }

"${mpi[@]}" -np 4 "$t/pp2dp2" "${run[@]}" --trace "$t/pp2dp2.json" >/dev/null
python3 "$check" "$t/pp2dp2.json" 4 2 3 "F0 F1 B0 B1" "F0 F1 B0 B1"
"$t/one" "${run[@]}" --threads 2 --trace "$t/one.json" >/dev/null
python3 "$check" "$t/one.json" 1 1 3

if "$t/one" "${run[@]}" --trace "$t/no/such/dir/x.json" >"$t/err.txt" 2>&1; then
  echo "FAIL: an unwritable --trace file was accepted"
  exit 1
fi
grep -q "error: --trace: cannot write '$t/no/such/dir/x.json'" "$t/err.txt" ||
  { echo "FAIL: unexpected error for an unwritable --trace:"; cat "$t/err.txt"; exit 1; }
grep -q "^done:" "$t/err.txt" && { echo "FAIL: trained before refusing --trace"; exit 1; }
echo "ok: --trace"
