#!/usr/bin/env bash
# Benchmark: the compiled GPT-2 124M trainer on the CPU, llm.c's CPU configuration (B=4, T=64).
# Prints the per-step lines and a summary: median ms/step, tokens/s and MFU over the fp32 FMA
# peak the trainer measures itself at start. Run on a quiet machine.
#   bench/train_gpt2.sh [steps=10] [threads=2]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-10}
threads=${2:-2}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
shardc=${SHARDC:-build/shardc}
"$shardc" build models/gpt2-124m.model -D micro_batch=4 -D batch=4 -D seq=64 -D zero=0 --world 1 -o "$t/train_gpt2" 2>/dev/null
# random GPT-2 token ids in llm.c's uint16 shard format (the numbers do not depend on the text)
python3 bench/gpt2_tokens.py "$t/tok.bin" 2>/dev/null || { echo "python3 is needed to write the token shard"; exit 1; }
"$t/train_gpt2" --data "$t/tok.bin" --val "$t/tok.bin" --val-batches 1 --eval-every 0 --steps "$steps" \
  --threads "$threads" --save-to "$t/ck" --log "$t/log.jsonl" | grep -E "^(model|steps|step +[0-9]+/|memory)"
python3 - "$t/log.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
rows = rows[1:] if len(rows) > 1 else rows   # the first step warms caches and threads
ms = statistics.median(r["ms"] for r in rows)
tps = statistics.median(r["tokens_per_s"] for r in rows)
mfu = statistics.median(r["mfu"] for r in rows)
print(f"gpt2-124m B=4 T=64: median {ms:.0f} ms/step, {tps:.0f} tokens/s, MFU {100*mfu:.1f}% over {len(rows)} steps")
PY
