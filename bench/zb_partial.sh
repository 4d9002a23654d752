#!/usr/bin/env bash
# bench/zb_partial.sh SHARDC — zb's W hold for the last N layers of each stage only (`zb_w hold(N)`,
# passes/recompute_split.c; docs/pipeline.md, "Under recompute"): for N from 0 (`zb_w recompute`) to a stage's
# layers (`zb_w hold`), the predicted step, W time (stage 1) and planned peak per stage (--cost): tiny 8 layers
# pp 2 x dp 2 zero 2 zb rc full bf16, 4 micro-batches, on an A100's figures (p4d-x1.topo), and Llama-3-8B
# dp 256 tp 2+sp pp 4 zb z2 rc full mb 1 on dgx-h100-x256.
set -euo pipefail
shardc=$(realpath "$1")
cd "$(dirname "$0")/.."
t=(models/tiny.model --target cuda --topology models/topo/p4d-x1.topo -D precision=bf16 -D zero=2 -D dp=2 -D pp=2
   -D layers=8 -D microbatches=4 -D schedule=zb -D recompute=full --world 4)
l=(models/llama3-8b.model --target cuda --topology models/topo/dgx-h100-x256.topo --world 2048 -D batch=4096
   -D zero=2 -D pp=4 -D tp=2 -D dp=256 -D sp=on -D pp_layers=even -D schedule=zb -D cp=1 -D micro_batch=1 -D recompute=full)
run() { # NAME N ARGS...: one line, the hold's N, the step, stage 1's W, the total and the peaks by stage
  local name=$1 n=$2 z=recompute out
  shift 2
  [ "$n" = all ] && z=hold
  [ "$n" != 0 ] && [ "$n" != all ] && z=hold:$n
  out=$("$shardc" plan "$@" -D zb_w=$z --cost --bytes 2>&1)
  printf '%s hold %s: step %s, stage 1 W %s, total %s B, peaks %s\n' "$name" "$n" \
    "$(grep -m1 '^#   step' <<<"$out" | awk '{print $3, $4}')" \
    "$(grep -m1 'stage 1: F' <<<"$out" | sed 's/.* W \([0-9.]* [mu]*s\).*/\1/')" \
    "$(grep -m1 '^#   total  .* B ' <<<"$out" | awk '{print $3}')" \
    "$(grep -m1 'peak per rank by stage' <<<"$out" | sed 's/.*stage: //')"
}
for n in 0 1 2 3 all; do run tiny "$n" "${t[@]}"; done
for n in 0 1 2 3 4 5 6 7 all; do run llama3-8b "$n" "${l[@]}"; done
