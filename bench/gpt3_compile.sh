#!/usr/bin/env bash
# Compile time of GPT-3 175B on 1024 A100s (models/topo/p4d-x128.topo), issue 18: the planner's
# best 40 GB candidate (dp 8 tp 8+sp pp 16 1f1b zero 2 recompute selective micro_batch 2: 96
# micro-batches per step, unrolled), the search's pick since (pp 16 zb zero 1 micro_batch 1: 192) and a pp-free
# plan (dp 128 tp 8+sp zero 1), each two ways:
#   confirm  `plan --search` with every knob pinned: one candidate compiled in a child the way the
#            search confirms one (passes without the per-pass verify, then the cost model)
#   plan     `shardc plan` (verify after every pass, its reports printed; the IR is printed only
#            with --ir since 2026-11-26: figures before that include printing it)
# CPU seconds (user + sys, children included) of one run each: on the shared 2-core machine the
# wall clock is several times that and says more about the load than about shardc.
#   bench/gpt3_compile.sh [SHARDC] [BASE]
set -euo pipefail
cd "$(dirname "$0")/.."
shardc=${1:-build/shardc}
base=${2:-}
m=(models/gpt3-175b.model --target cuda --topology models/topo/p4d-x128.topo -D tp=8 -D sp=on -D cp=1 -D offload=off
  -D recompute=selective)
pp=(-D dp=8 -D pp=16 -D schedule=1f1b -D zero=2 -D micro_batch=2)
flat=(-D dp=128 -D pp=1 -D zero=1 -D micro_batch=1)
zb=(-D dp=8 -D pp=16 -D schedule=zb -D zero=1 -D micro_batch=1 -D recompute=none) # (the search's pick since session 33)
confirm=(--search --compile-limit 600 --budget 1200 --confirm 1 --top 1)
cpu() { # CPU seconds of one run: cpu SHARDC ARGS...
  local f
  f=$(mktemp)
  /usr/bin/time -o "$f" -f '%U %S' "$1" plan "${m[@]}" "${@:2}" >/dev/null 2>&1 || true
  tail -1 "$f" | awk '{ printf "%.2f", $1 + $2 }'
  rm -f "$f"
}
echo "nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-22s %10s %10s\n' case "CPU s" "base CPU s"
for c in pp zb flat; do
  declare -n k=$c
  for how in confirm plan; do
    if [[ $how == confirm ]]; then extra=("${confirm[@]}"); else extra=(); fi
    a=$(cpu "$shardc" "${k[@]}" "${extra[@]}")
    b=-
    if [[ -n $base ]]; then b=$(cpu "$base" "${k[@]}" "${extra[@]}"); fi
    printf '%-22s %10s %10s\n' "$c $how" "$a" "$b"
  done
done
