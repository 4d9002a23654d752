#!/usr/bin/env bash
# tests/passes/verify_audit.sh SHARDC — the passes that record their changes (passes/pipeline.c
# Pass.records: the verifier after them checks only the graphs they changed) record every one:
# each plan below compiled under SHARDC_VERIFY=audit (every graph's contents hashed, a change made
# without ir_touch an error naming the pass and the graph), pipelines, ZeRO, recompute, cp, the
# CUDA target's fusions and offload among them; each must compile as it does without the audit.
set -uo pipefail
cd "$(dirname "$0")/../.."
shardc=$1
status=0
plans=(
  "models/tiny.model|-D layers=4 -D micro_batch=2 -D batch=8 -D dp=1 -D pp=2 -D schedule=zb --world 2"
  "models/tiny.model|-D layers=4 -D micro_batch=2 -D batch=8 -D dp=1 -D tp=2 -D pp=2 -D schedule=interleaved --world 4"
  "models/tiny.model|-D seq=32 -D micro_batch=4 -D dp=2 -D zero=3 --world 2"
  "models/tiny.model|-D seq=32 -D micro_batch=4 -D dp=2 -D zero=2 -D offload=on --world 2 --target cuda"
  "models/llama3-8b.model|-D pp=4 -D batch=64 --world 64 -D zero=3 -D recompute=selective"
  "models/llama3-8b.model|-D pp=4 -D schedule=zb --world 32 -D batch=64"
  "models/llama3-8b.model|-D vocab=128 -D seq=8 -D d=32 -D heads=4 -D kv_heads=2 -D layers=4 -D ffn=48 -D pp=2 -D dp=2 -D tp=1 -D sp=off -D schedule=zb -D zero=2 -D bucket=16KiB -D micro_batch=2 -D batch=8 --world 4"
  "models/llama3-8b.model|-D cp=2 -D tp=2 --world 8"
  "models/gpt2-124m.model|--target cuda -D precision=bf16 --world 4 -D zero=3 -D recompute=full"
  "models/gpt2-124m.model|--target cuda -D pp=2 --world 4 -D zero=1"
  "models/gpt3-175b.model|--target cuda --topology models/topo/p4d-x128.topo -D tp=8 -D sp=on -D dp=8 -D pp=16 -D zero=2 -D recompute=selective -D micro_batch=2"
)
for c in "${plans[@]}"; do
  IFS='|' read -r model flags <<<"$c"
  # shellcheck disable=SC2086
  "$shardc" plan "$model" $flags >/dev/null 2>&1
  want=$?
  # shellcheck disable=SC2086
  err=$(SHARDC_VERIFY=audit "$shardc" plan "$model" $flags 2>&1 >/dev/null)
  got=$?
  if [ "$got" != "$want" ] || grep -q "without ir_touch\|IR invalid" <<<"$err"; then
    echo "FAILED: shardc plan $model $flags under SHARDC_VERIFY=audit (exit $got, without it $want):"
    grep "shardc:" <<<"$err" | head -5
    status=1
  fi
done
[ "$status" = 0 ] && echo "verify_audit: ${#plans[@]} plans, every change recorded"
exit "$status"
