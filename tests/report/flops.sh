#!/usr/bin/env bash
# tests/report/flops.sh — `shardc plan`'s FLOPs per token (what every trainer's MFU divides by) are the
# model's, whatever the plan: tiny under accumulation 1/2/4 (regions, the peeled last micro-step),
# tp 2, cp 2 (ring hops), pp 2 with GPipe and 1F1B (stages joined by send/recv) all print the
# single-rank figure (pp 2 x dp 2 too: the gradient buckets had put the loss's sum over the stages into the tied
# embedding's gradient all-reduce, so the backward counted as forward, 2.015 MFLOP a token for 0.786); GPT-2 124M's forward is 2 x its 124.48 M parameters + attention counted in full
# (4 x layers x seq x d = 37.7 MFLOP) within 1 %.
# Usage: tests/report/flops.sh SHARDC
set -uo pipefail
shardc=${1:?usage: flops.sh SHARDC}
cd "$(dirname "$0")/../.."
fail=0
fwd() { "$shardc" plan "$@" 2>&1 | sed -n 's/^flops per token: forward \([^,]*\),.*/\1/p'; }
ref=$(fwd models/tiny.model)
[ -n "$ref" ] || { echo "FAIL: no flops line for tiny"; exit 1; }
for plan in "-D batch=32" "-D batch=64" "-D tp=2 -D dp=1" "-D cp=2 -D dp=1" \
  "-D batch=64 -D pp=2 -D dp=1 -D schedule=gpipe" "-D batch=64 -D pp=2 -D dp=1 -D schedule=1f1b" \
  "-D batch=64 -D pp=2 -D dp=2 --world 4" "-D batch=64 -D pp=2 -D dp=2 -D zero=3 -D schedule=zb --world 4"; do
  # shellcheck disable=SC2086
  got=$(fwd models/tiny.model $plan)
  if [ "$got" != "$ref" ]; then echo "FAIL: tiny $plan: forward $got per token, want $ref (one rank)"; fail=1; fi
done
g=$(fwd models/gpt2-124m.model)
awk -v g="$g" 'BEGIN { split(g, a, " "); v = a[1] * (a[2] == "GFLOP" ? 1e9 : a[2] == "MFLOP" ? 1e6 : 1);
  want = 2 * 124.48e6 + 4 * 12 * 1024 * 768; d = (v - want) / want; if (d < 0) d = -d;
  if (d > 0.01) { printf "FAIL: gpt2-124m forward %s per token, want %.1f MFLOP\n", g, want / 1e6; exit 1 } }' || fail=1
[ $fail -eq 0 ] && echo "flops per token: tiny $ref under every plan; gpt2-124m $g"
exit $fail
