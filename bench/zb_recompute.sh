#!/usr/bin/env bash
# bench/zb_recompute.sh SHARDC — schedule zb under recompute (docs/pipeline.md, "Zero bubble under
# recompute"): tiny's GEMM + attention FLOPs of a step (bench/ir_flops.py) and its predicted F / B / W and
# per-stage peaks on the CPU topology's defaults, and Llama-3-8B dp 256 tp 2+sp pp 4 zb z2 mb 1 on
# dgx-h100-x256 (--cost: the step, the planned peak per stage). Run it with a shardc before and after.
set -euo pipefail
shardc=$(realpath "$1")
cd "$(dirname "$0")/.."
t=(models/tiny.model -D layers=8 -D micro_batch=1 -D batch=8 -D dp=1 -D pp=4 -D schedule=zb --world 4)
l=(models/llama3-8b.model --target cuda --topology models/topo/dgx-h100-x256.topo --world 2048 -D batch=4096
   -D zero=2 -D pp=4 -D tp=2 -D dp=256 -D sp=on -D pp_layers=even -D schedule=zb -D cp=1 -D micro_batch=1)
for rc in none selective full; do
  echo "tiny pp 4 zb rc $rc: $("$shardc" plan "${t[@]}" -D recompute="$rc" --dump-ir 2>/dev/null | python3 bench/ir_flops.py)"
  "$shardc" plan "${t[@]}" -D recompute="$rc" --cost 2>&1 | grep -E "stage 1: F|peak per rank by stage|^#   step"
done
for rc in selective full; do
  echo "llama3-8b pp 4 zb rc $rc:"
  "$shardc" plan "${l[@]}" -D recompute="$rc" --cost 2>&1 | grep -E "stage 1: F|peak per rank by stage|^#   step"
done
